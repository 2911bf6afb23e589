"""On a real GPU: NVML's power reading, power limit and energy counter, read without a CUDA context in this
process, while another process keeps the GPU busy (pytest -m gpu; skipped without one)."""

from __future__ import annotations

import subprocess

import pytest

from conftest import KERNEL_PYTHON
from gpumem_kernel.probe.power import NO_COUNTER, span_energy
from gpumem_kernel.probe.prober import Prober
from gpumem_kernel.wire.protocol import validate

pytestmark = [pytest.mark.gpu]

BUSY = """
import time, torch
x = torch.randn(4096, 4096, device="cuda")
end = time.monotonic() + 3.0
while time.monotonic() < end:
    y = x @ x
    torch.cuda.synchronize()
"""
# the power reading in a process of its own that has imported torch: this test's process may hold a context
# already (another gpu test's), which would hide one made by the reading
READ_ONLY = """
import torch
from gpumem_kernel.probe.prober import Prober
device = next(d for d in Prober()().to_dict()["gpu"]["devices"] if d["cuda_index"] == 0)
print(device["power_mw"] is not None, torch.cuda.is_initialized())
"""


def cuda0(sample: dict) -> dict:
    return next(d for d in sample["gpu"]["devices"] if d["cuda_index"] == 0 and not d["mig"])


def test_the_real_energy_counter_grows_while_the_gpu_works():
    prober = Prober()  # os.environ's CUDA_VISIBLE_DEVICES, as the busy process sees it
    before = prober().to_dict()
    validate(before)
    device = cuda0(before)
    assert device["power_mw"] is not None and device["power_mw"] > 0, device["power_note"]
    assert device["power_limit_mw"] is not None and device["power_limit_mw"] > 0, device["power_note"]
    subprocess.run([KERNEL_PYTHON, "-c", BUSY], check=True, timeout=120)
    after = prober().to_dict()
    (energy,) = span_energy(before, [], after, 0)
    assert energy.energy.joules is not None and energy.energy.joules > 0, energy.reason
    assert 1 < energy.energy.mean_watts < 1.5 * device["power_limit_mw"] / 1000
    if device["energy_mj"] is None:  # before Volta: no counter, power × time, and the note says so
        assert device["power_note"] == NO_COUNTER
    else:
        assert cuda0(after)["energy_mj"] > device["energy_mj"] and energy.energy.note is None
    read = subprocess.run([KERNEL_PYTHON, "-c", READ_ONLY], capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr[-2000:]
    assert read.stdout.split() == ["True", "False"], read.stdout  # a power figure, and NVML only: no CUDA context
