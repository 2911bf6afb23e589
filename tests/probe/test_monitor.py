"""The Python API's live measurements: get_gpu_info()/print_gpu_info() (NVML) and the memory monitor, a context
manager and a decorator."""

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gpumem_kernel.probe import gpu_info  # noqa: E402
from gpumem_kernel.probe.monitor import monitor_gpu_memory  # noqa: E402


def test_gpu_info_lists_the_visible_gpus_and_prints_them(capsys: Any) -> None:
    infos = gpu_info.get_gpu_info()
    assert isinstance(infos, list)
    gpu_info.print_gpu_info()
    out = capsys.readouterr().out
    assert ("GPU Information" in out) if infos else ("No NVIDIA GPU visible" in out)


def test_monitor_is_a_context_manager_and_a_decorator(capsys: Any) -> None:
    with monitor_gpu_memory(0) as monitor:
        block = [bytearray(1 << 20) for _ in range(4)]
    assert monitor.result is not None and monitor.result.delta_bytes is not None and block
    if not torch.cuda.is_initialized():
        assert monitor.result.device == "host" and "CUDA is not initialised" in monitor.result.note

    @monitor_gpu_memory(device_id=0)
    def train() -> int:
        return 3

    assert train() == 3
    out = capsys.readouterr().out
    assert "train" in out and out.count("🔍") == 2
    assert "GPU" in repr(monitor_gpu_memory(0)) or "CUDA" in repr(monitor_gpu_memory(0))
