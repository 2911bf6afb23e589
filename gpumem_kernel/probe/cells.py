"""Which notebook cell a code file name is: the execution count IPython compiled it under.

The memory timeline names the cells of its frames, and the OOM checklist the cell an evaluation ran in; both read
it here, at the bottom, so neither depends on the other.
"""

from __future__ import annotations

import sys
from typing import Any, Optional


def cell_of(filename: str) -> Optional[int]:
    """The execution count of the notebook cell whose code has this file name; None outside IPython or for
    another file."""
    shell = _shell()
    if shell is None:
        return None
    compiler = getattr(shell, "compile", None)
    mapping = getattr(compiler, "_filename_map", None)  # IPython >= 8: file name -> execution count
    if isinstance(mapping, dict):
        number = mapping.get(filename)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    if filename.startswith("<ipython-input-"):  # IPython < 8: <ipython-input-N-hash>
        number_text = filename[len("<ipython-input-") :].split("-", 1)[0]
        if number_text.isdigit():
            return int(number_text)
    return None


def _shell() -> Any:
    if "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()
