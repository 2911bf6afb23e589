"""`%gpumem watch [--compact] [stop]`: live GPU memory in the output area (watch/)."""

from __future__ import annotations

from typing import Any

from IPython.core.magic_arguments import argument, magic_arguments

from gpumem_kernel.magics.parsing import parse as _parse
from gpumem_kernel.watchwidget import live


@magic_arguments("gpumem watch")
@argument("action", nargs="?", choices=["stop"], help="stop: stop every live watch of this kernel")
@argument("--compact", action="store_true", help="one line: the bar and used / total of each GPU")
def watch_arguments(line: str) -> None:
    """Live GPU memory of this kernel in the output area, updated once a second while cells run: per GPU the
    panel's bar (allocated, cached, outside the allocator, other processes, free), the last minutes, the peak
    since the watch started, host memory and workers, "Clear GPU memory", and the diagnosis after a CUDA
    out-of-memory error. Needs a front end with Jupyter widgets (JupyterLab, Notebook 7, VS Code, Colab); without
    one it shows a snapshot. Never initialises CUDA."""


def watch(shell: Any, rest: str) -> None:
    args = _parse(watch_arguments, "watch", rest)
    if args.action == "stop":
        print(live.stop())
        return
    problem = live.start(shell, compact=args.compact)
    if problem:
        print(problem)
