"""`%gpumem watch` and `gpumem_kernel.watch()`: live GPU memory in the output area, in every front end that
renders Jupyter widgets (JupyterLab or Notebook 7 without our labextension, VS Code, Colab), fed once a second
by the kernel's one sampler (session.py), with or without the panel. Never creates a CUDA context: it shows what
the sampler already reads.

The package is itself callable (`gpumem_kernel.watch()`), as holders is: importing a submodule binds the
package to `gpumem_kernel.watch`, so a function of that name would vanish once the extension loads.
"""

from __future__ import annotations

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, compact: bool = False, stop: bool = False) -> None:
        """Show live GPU memory of this kernel in the output area (`compact=True`: one line); `stop=True` stops
        every live watch (each keeps its last picture)."""
        from gpumem_kernel.watch import live

        if stop:
            print(live.stop())
            return
        problem = live.start(compact=compact)
        if problem:
            print(problem)


sys.modules[__name__].__class__ = _CallablePackage
