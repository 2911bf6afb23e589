"""Holders: which of the user's variables hold GPU memory (issue 27).

After each cell where CUDA is in use, the hook (holders.hook) walks the user's variables within a time budget
to the storages they reach; `%gpumem holders` and `gpumem_kernel.holders()` walk on request. Parts: walk
(objects → storages, bounded), describe (a line per holder), collect (charging each storage once), report (the
dataclasses and the table).

`gpumem_kernel.holders` is this package and, as the brief's Python API, callable: `gpumem_kernel.holders()`.
A function of that name in gpumem_kernel/__init__.py would not do: importing this package rebinds the name
to the package, so the function would vanish as soon as the extension loads.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Optional


class _CallablePackage(types.ModuleType):
    def __call__(self, shell: Any = None, budget_ms: Optional[float] = 1000.0) -> Any:
        """Which of your variables hold GPU memory, largest first, and the remainder no variable reaches (a
        HoldersReport: IPython shows it as a table; .to_dict() for JSON). Never initialises CUDA."""
        from gpumem_kernel.holders.collect import holders

        return holders(shell, budget_ms)


sys.modules[__name__].__class__ = _CallablePackage
