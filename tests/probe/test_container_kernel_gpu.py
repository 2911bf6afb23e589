"""On a real GPU: a kernel in its own PID namespace, as a container runs it, allocates CUDA memory and finds itself
in NVML's list under its host PID, with the real driver and torch (tests/probe/test_container_kernel.py checks the
same logic with an NVML double on any machine)."""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import psutil
import pytest

from kernel_harness import KernelHarness
from pid_namespace import WAIT, host_pid_of_kernel, interpreter, poll

pytestmark = [pytest.mark.gpu, pytest.mark.kernel]


@pytest.fixture(scope="module")
def namespaced_python() -> Iterator[str]:
    yield from interpreter()


GiB = 1024**3


def entry(kernel: KernelHarness, host: int) -> Optional[Dict[str, Any]]:
    sample = kernel.evaluate("__import__('gpumem_kernel.extension').extension.current().sampler.latest()")
    for device in sample["gpu"]["devices"]:
        for process in device["processes"]:
            if process["pid"] == host:
                return process
    return None


def test_a_kernel_in_a_pid_namespace_finds_its_host_pid_after_its_first_cuda_allocation(namespaced_python) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    kernel = KernelHarness(python=namespaced_python).start(timeout=WAIT)
    host = host_pid_of_kernel(kernel)
    try:
        assert kernel.evaluate("__import__('os').getpid()") == 1  # its own PID namespace
        kernel.bootstrap()
        kernel.execute("import torch\nx = torch.empty(2**28, dtype=torch.float32, device='cuda')")  # 1 GiB
        first = poll(
            "the kernel's context under its host PID",
            lambda: (e := entry(kernel, host)) is not None and e["relation"] != "external" and e,
        )
        assert first["local_pid"] == 1 and first["used"] >= GiB, first
        # the allocator grows by 1 GiB and NVML's figure for that host PID follows it: confirmed as this kernel
        kernel.execute("y = torch.empty(2**28, dtype=torch.float32, device='cuda')")
        mine = poll(
            "the kernel confirmed under its host PID",
            lambda: (e := entry(kernel, host)) is not None and e["relation"] == "this_kernel" and e,
        )
        assert mine["this_kernel"] is True and mine["used"] >= 2 * GiB, mine
    finally:
        kernel.stop()
        try:
            psutil.Process(host).kill()  # the namespace's init: its whole namespace ends with it
        except psutil.NoSuchProcess:
            pass
