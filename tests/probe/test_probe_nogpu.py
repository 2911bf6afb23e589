"""The real probe on this machine, with or without an NVIDIA driver: the GPU part says what NVML says here, and
the host numbers must be right."""

from __future__ import annotations

import os
import sys
from typing import Optional

import psutil

from gpumem_kernel.probe.nvml import Nvml
from gpumem_kernel.probe.prober import probe
from gpumem_kernel.wire.protocol import validate


def nvml_gpu_count() -> Optional[int]:
    """How many GPUs this machine's NVML lists; None where NVML does not start (no driver, no nvidia-ml-py)."""
    nvml = Nvml()
    if nvml.start() is not None:
        return None
    try:
        return int(nvml.call("nvmlDeviceGetCount"))
    finally:
        nvml.shutdown()  # NVML counts its inits: the probe's own session stays open


def test_the_gpu_part_says_what_this_machines_driver_says_and_the_sample_is_valid():
    sample = probe().to_dict()

    if nvml_gpu_count():
        assert sample["gpu"]["available"] is True and sample["gpu"]["reason"] is None
    else:
        assert sample["gpu"]["available"] is False
        assert sample["gpu"]["reason"]  # e.g. "NVIDIA driver library (libnvidia-ml.so.1) not found"
        assert sample["gpu"]["devices"] == []
    validate(sample)


def test_host_numbers_agree_with_psutil():
    host = probe().to_dict()["host"]

    rss = psutil.Process().memory_info().rss
    assert abs(host["rss"] - rss) <= 0.2 * rss
    assert host["total"] == psutil.virtual_memory().total
    assert 0 < host["available"] <= host["total"]


def test_kernel_part_names_this_process_and_does_not_import_torch():
    had_torch = "torch" in sys.modules
    sample = probe().to_dict()

    assert sample["kernel"]["pid"] == os.getpid()
    assert ("torch" in sys.modules) == had_torch
    assert sample["kernel"]["torch"]["imported"] == had_torch
