"""A kernel in its own PID namespace (`unshare --pid --fork --mount-proc`), as a container runs it: whether this
machine can make one, and the kernel's PID as the host (and NVML) sees it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import psutil
import pytest

from kernel_harness import KernelHarness

WAIT = 120.0  # seconds: generous, the machine may be heavily loaded


def unshare_works() -> Optional[str]:
    """None when a PID namespace can be made here; else why not (tried, not assumed)."""
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "test $$ -eq 1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare could not run: {exc}"
    if done.returncode != 0:
        return f"unshare --pid --fork --mount-proc is not permitted here: {done.stderr.strip() or done.returncode}"
    return None


def interpreter() -> Iterator[str]:
    """A Python that starts in a PID namespace of its own (for a module fixture); skips where none can be made."""
    reason = unshare_works()
    if reason is not None:
        pytest.skip(reason)
    with tempfile.TemporaryDirectory(prefix="gpumem-pidns-") as folder:
        wrapper = Path(folder) / "python-in-pid-namespace"
        wrapper.write_text(f'#!/bin/sh\nexec unshare --pid --fork --kill-child --mount-proc "{sys.executable}" "$@"\n')
        wrapper.chmod(0o755)
        yield str(wrapper)


def host_pid_of_kernel(kernel: KernelHarness) -> int:
    """The kernel's PID as the host (and NVML) sees it: the process unshare started."""
    launcher = psutil.Process(kernel.km.provisioner.pid)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        children = launcher.children()
        if children:
            return children[0].pid
        time.sleep(0.1)
    raise TimeoutError("unshare started no kernel")


def poll(what: str, probe: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last seen: {last!r}")
