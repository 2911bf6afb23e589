"""`%gpumem watch` and `gpumem_kernel.watch()`: live GPU memory in the output area, in every front end that
renders Jupyter widgets (JupyterLab or Notebook 7 without our labextension, VS Code, Colab), fed once a second
by the kernel's one sampler (session.py), with or without the panel. Never creates a CUDA context: it shows what
the sampler already reads.

The package is not named `watch`: importing a submodule binds the package to its parent's attribute of the same
name, which would replace the public function `gpumem_kernel.watch` (below) once the extension loads.
"""

from __future__ import annotations


def watch(compact: bool = False, stop: bool = False) -> None:
    """Show live GPU memory of this kernel in the output area (`compact=True`: one line); `stop=True` stops
    every live watch (each keeps its last picture)."""
    from gpumem_kernel.watchwidget import live

    if stop:
        print(live.stop())
        return
    problem = live.start(compact=compact)
    if problem:
        print(problem)
