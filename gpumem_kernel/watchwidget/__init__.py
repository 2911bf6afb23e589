"""`%gpumem watch` and `gpumem_kernel.watch()`: live GPU memory in the output area, in every front end that
renders Jupyter widgets (JupyterLab or Notebook 7 without our labextension, VS Code, Colab), fed once a second
by the kernel's one sampler (session.py), with or without the panel. Never creates a CUDA context: it shows what
the sampler already reads.

The package is not named `watch`: importing a submodule binds the package to its parent's attribute of the same
name, which would replace the public function `gpumem_kernel.watch` (below) once the extension loads.
"""

from __future__ import annotations

from typing import Any


def watch(compact: bool = False, stop: bool = False) -> Any:
    """Show live GPU memory of this kernel in the output area (`compact=True`: one line); `stop=True` stops
    every live watch (each keeps its last picture).

    In marimo, which shows the object a cell ends with, it returns the live widget instead of showing it: end a
    cell with `gpumem_kernel.watch()`. Elsewhere it returns None (a returned widget would be shown twice)."""
    from gpumem_kernel.watchwidget import live

    if stop:
        print(live.stop())
        return None
    if live.in_marimo():
        return live.cell_watch(compact=compact)
    problem = live.start(compact=compact)
    if problem:
        print(problem)
    return None
