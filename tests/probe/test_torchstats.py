"""Allocator statistics are read only when the user's torch has already initialised CUDA."""

from __future__ import annotations

import sys
import types

import pytest

from fake_nvml import FakeGpu, GiB
from gpumem_kernel.wire.protocol import validate
from gpumem_kernel.probe.torchstats import (
    allocator_stats,
    cuda_initialised,
    initialised_cuda,
    loaded_torch,
    torch_info,
)

STATS = {
    "allocated_bytes.all.current": GiB,
    "reserved_bytes.all.current": 2 * GiB,
    "allocated_bytes.all.peak": 3 * GiB,
    "reserved_bytes.all.peak": 4 * GiB,
    "num_ooms": 1,
    "num_alloc_retries": 2,
}


@pytest.fixture
def fake_torch(monkeypatch):
    """A stand-in torch in sys.modules; any CUDA call before initialisation fails the test."""
    cuda = types.ModuleType("torch.cuda")
    cuda.initialized = False
    cuda.is_initialized = lambda: cuda.initialized

    def guarded(result):
        def call(*args):
            if not cuda.initialized:
                raise AssertionError("read CUDA state before the user initialised CUDA")
            return result(*args)

        return call

    cuda.device_count = guarded(lambda: 1)
    cuda.memory_stats = guarded(lambda index: dict(STATS))
    cuda.get_device_properties = guarded(lambda index: types.SimpleNamespace(multi_processor_count=80))
    torch = types.ModuleType("torch")
    torch.__version__ = "2.13.0+fake"
    torch.cuda = cuda
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.cuda", cuda)
    return cuda


def test_without_torch_nothing_is_read_and_nothing_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert allocator_stats() == {}
    assert torch_info().imported is False
    assert "torch" not in sys.modules


def test_imported_torch_without_cuda_is_left_alone(fake_torch, make_prober):
    sample = make_prober([FakeGpu("GPU", "GPU-1")])().to_dict()

    assert sample["kernel"]["torch"] == {"imported": True, "version": "2.13.0+fake", "cuda_initialized": False}
    assert sample["gpu"]["devices"][0]["allocator"] is None
    assert sample["gpu"]["devices"][0]["sm_count"] is None


def test_after_cuda_init_the_allocator_is_attached_to_the_matching_cuda_device(fake_torch, make_prober):
    fake_torch.initialized = True
    prober = make_prober([FakeGpu("GPU", "GPU-0"), FakeGpu("GPU", "GPU-1")], env={"CUDA_VISIBLE_DEVICES": "1"})

    sample = prober().to_dict()

    hidden, visible = sample["gpu"]["devices"]
    assert hidden["allocator"] is None
    assert visible["allocator"] == {
        "allocated": GiB,
        "reserved": 2 * GiB,
        "peak_allocated": 3 * GiB,
        "peak_reserved": 4 * GiB,
        "num_ooms": 1,
        "num_alloc_retries": 2,
    }
    assert visible["sm_count"] == 80
    assert sample["kernel"]["torch"]["cuda_initialized"] is True
    validate(sample)


def test_a_half_imported_torch_is_not_touched(fake_torch):
    fake_torch.initialized = True
    sys.modules["torch"].__spec__ = types.SimpleNamespace(_initializing=True)  # `import torch` still running
    assert allocator_stats() == {}
    assert loaded_torch() is None and initialised_cuda() is None and not cuda_initialised()
    sys.modules["torch"].__spec__ = types.SimpleNamespace(_initializing=False)  # the import finished
    assert loaded_torch() is sys.modules["torch"] and initialised_cuda() is fake_torch and cuda_initialised()


def test_a_broken_cuda_query_counts_as_not_initialised(fake_torch):
    def broken():
        raise RuntimeError("driver gone")

    fake_torch.is_initialized = broken
    assert initialised_cuda() is None and not cuda_initialised()
