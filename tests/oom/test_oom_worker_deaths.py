"""A DataLoader worker's death while its error is shown: PyTorch's SIGCHLD handler raises "DataLoader worker (pid N)
is killed by signal" wherever the main thread is, as long as the failed iterator lives. While the traceback is shown
and the checklist built, that raise no longer replaces them; the handler is PyTorch's again afterwards."""

from __future__ import annotations

import os
import signal

import pytest
from IPython.utils.capture import capture_output

from gpumem_kernel.oom.bundle import OOM_MIME
from gpumem_kernel.oom.handler import install_oom_handler, uninstall_oom_handler
from ipython_shell import fresh_shell

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGCHLD"), reason="needs POSIX signals")

CELL = """\
try:
    raise RuntimeError("DataLoader worker (pid 4321) is killed by signal: Killed.")
except RuntimeError as death:
    raise RuntimeError("DataLoader worker (pid(s) 4321) exited unexpectedly") from death
"""


def _as_pytorch_raises(signum, frame):
    raise RuntimeError("DataLoader worker (pid 4322) is killed by signal: Killed.")


def _second_worker_dies() -> None:
    """The probe the handler runs: the other worker dies now, as a loaded machine's timing can have it."""
    os.kill(os.getpid(), signal.SIGCHLD)
    for _ in range(1000):  # the signal's Python handler runs between bytecodes, here
        pass


def test_a_second_worker_dying_while_the_checklist_is_built_leaves_it_whole():
    previous = signal.signal(signal.SIGCHLD, _as_pytorch_raises)
    try:
        with fresh_shell() as shell:
            install_oom_handler(shell, probe=_second_worker_dies)
            try:
                with capture_output() as captured:
                    shell.run_cell(CELL)
            finally:
                uninstall_oom_handler(shell)
            assert signal.getsignal(signal.SIGCHLD) is _as_pytorch_raises
    finally:
        signal.signal(signal.SIGCHLD, previous)

    assert "could not build the OOM checklist" not in captured.stderr
    bundles = [o.data for o in captured.outputs if OOM_MIME in o.data]
    assert len(bundles) == 1 and bundles[0][OOM_MIME]["info"]["family"] == "host"
    assert "exited unexpectedly" in captured.stdout + captured.stderr
