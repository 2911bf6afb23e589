"""Shared fixtures; `gpu` tests are skipped unless a CUDA build of torch and an NVIDIA GPU are present."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from fake_nvml import FakeGpu, FakeNvml
from gpumem_kernel.probe.host import CgroupReader, HostReader
from gpumem_kernel.probe.nvml import Nvml
from gpumem_kernel.probe.prober import Prober

KERNEL_PYTHON = os.environ.get("GPUMEM_TEST_KERNEL_PYTHON") or sys.executable
# an analysis's progress line shows once it has run 2 s, which a busy machine reaches in any test (and in the test
# kernels, which inherit this): it shows where a test asks for it (tests/magics/test_analysis_progress.py)
os.environ.setdefault("GPUMEM_PROGRESS_AFTER", "inf")

_GPU_CHECK = """
import sys
import torch
import pynvml
pynvml.nvmlInit()
sys.exit(0 if torch.cuda.is_available() and pynvml.nvmlDeviceGetCount() > 0 else 1)
"""


# What an NVIDIA driver makes on Linux, in a container too (the NVIDIA container toolkit mounts both): where none is
# there, no CUDA device can be, and the subprocess below (an import of torch, about 2 s) is not needed.
_DRIVER_PATHS = ("/dev/nvidiactl", "/proc/driver/nvidia")


@functools.lru_cache(maxsize=None)
def gpu_present() -> bool:
    """Checked in a subprocess: asking torch here would initialise CUDA in the test runner."""
    if not any(os.path.exists(path) for path in _DRIVER_PATHS):
        return False
    try:
        return subprocess.run([KERNEL_PYTHON, "-c", _GPU_CHECK], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not gpu_present():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU and a CUDA build of torch")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one thread while a test traces (the machines running the tests share their cores)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_cgroup(tmp_path) -> CgroupReader:
    """A cgroup reader that finds no limit, so host numbers do not depend on the test machine."""
    return CgroupReader(root=str(tmp_path / "nocgroup"), proc_cgroup=str(tmp_path / "nocgroup-proc"))


@pytest.fixture
def make_prober(no_cgroup) -> Callable[..., Prober]:
    """Build a Prober over a fake NVML: make_prober([FakeGpu(...)], env={...})."""

    def make(
        gpus: List[FakeGpu], env: Optional[dict] = None, init_error: Optional[int] = None, pid: Optional[int] = None
    ) -> Prober:
        fake = FakeNvml(gpus, init_error=init_error)
        return Prober(
            nvml=Nvml(fake),
            env={} if env is None else env,
            host=HostReader(cgroup=no_cgroup),
            pid=pid,
        )

    return make


@contextlib.contextmanager
def gpumem_shell(names: Optional[Dict[str, Any]] = None) -> Iterator[Any]:
    """The shared IPython shell with the extension loaded and `names` defined; afterwards it is as before
    (the shell is shared between test modules)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    before = set(shell.user_ns)
    shell.extension_manager.load_extension("gpumem_kernel")
    shell.user_ns.update(names or {})
    try:
        yield shell
    finally:
        shell.extension_manager.unload_extension("gpumem_kernel")
        for name in set(shell.user_ns) - before:
            del shell.user_ns[name]
