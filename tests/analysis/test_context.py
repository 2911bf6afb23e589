"""The process total outside the caching allocator (analysis/gpus/cuda_context.py): each factor moves the estimate the
documented way, the published points bound it, and reading the factors creates no CUDA context."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fake_nvml import FakeGpu, FakeNvml  # noqa: E402

from gpumem_kernel.analysis.gpus import cuda_context as ctx  # noqa: E402
from gpumem_kernel.analysis.pipeline import device as analysis_device  # noqa: E402

MiB = 1 << 20


def _f(**kw) -> ctx.ContextFactors:
    base = dict(
        cuda_runtime="12.4",
        torch_version="2.5.1",
        module_loading=None,
        compute_capability="9.0",
        driver_version="550.54.15",
    )
    base.update(kw)
    return ctx.ContextFactors(**base)


def test_each_factor_moves_the_estimate_the_documented_way() -> None:
    lazy = ctx.estimate(_f())
    assert lazy.lazy and lazy.bytes == 544 * MiB
    assert ctx.estimate(_f(module_loading="EAGER")).bytes > lazy.bytes  # forced eager loads every module
    assert ctx.estimate(_f(cuda_runtime="11.6")).bytes > lazy.bytes  # no lazy loading before 11.7
    assert ctx.estimate(_f(driver_version="510.47.03")).bytes > lazy.bytes  # R515+ needed
    assert not ctx.estimate(_f(torch_version="1.12.1", cuda_runtime="11.7")).lazy  # torch < 1.13 leaves it unset
    assert ctx.estimate(_f(torch_version="1.12.1", cuda_runtime="12.2")).lazy  # CUDA 12.2's own default
    assert ctx.estimate(_f(module_loading="LAZY", torch_version="1.12.1", cuda_runtime="11.7")).lazy
    assert ctx.estimate(_f(compute_capability="7.0")).bytes < ctx.estimate(_f(compute_capability="8.0")).bytes
    assert ctx.estimate(_f(compute_capability="8.0")).bytes < lazy.bytes
    # the torch build: a CUDA 10 wheel's eager image is smaller than a CUDA 11 wheel's
    assert ctx.eager_torch_image("10.1")[0] < ctx.eager_torch_image("11.2")[0]


def test_basis_names_every_factor() -> None:
    e = ctx.estimate(_f(libraries=ctx.libraries_for(nn.Conv2d(3, 8, 3), distributed=True)))
    assert e.basis == "estimate: CUDA 12.4, lazy loading, sm_90, driver 550.54.15, cuBLAS + cuBLASLt + cuDNN + NCCL"
    assert {p.factor for p in e.parts} >= {"architecture", "cuBLAS", "cuBLASLt", "cuDNN", "NCCL"}
    eager = ctx.estimate(_f(cuda_runtime="11.2", driver_version="460.91", compute_capability="7.0"))
    assert "eager loading" in eager.basis and any(p.factor == "torch build (eager)" for p in eager.parts)
    assert ctx.libraries_for(nn.Linear(2, 2)) == ("cuBLAS", "cuBLASLt")
    assert "cuDNN" in ctx.libraries_for(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))


def test_every_calibration_point_cites_its_source() -> None:
    for p in ctx.CALIBRATION:
        assert p.url.startswith("https://") and p.what and p.loading in ("lazy", "eager") and p.mib > 0


def test_published_lazy_points_lie_within_the_stated_uncertainty() -> None:
    known = [p for p in ctx.CALIBRATION if p.loading == "lazy" and p.cc]
    assert known  # RTX 6000 Ada, torch 2.10+cu130: 426 MiB against 448
    for p in known:
        e = ctx.estimate(_f(cuda_runtime=p.cuda, torch_version="2.10", compute_capability=p.cc, driver_version=None))
        assert abs(e.bytes - p.mib * MiB) <= e.uncertainty_bytes, p
    # GPU not named: within the uncertainty of some generation's figure
    lo, hi = 320 * MiB - ctx.LAZY_UNCERTAINTY, 544 * MiB + ctx.LAZY_UNCERTAINTY
    assert all(lo <= p.mib * MiB <= hi for p in ctx.CALIBRATION if p.loading == "lazy")
    # the one same-machine pair (PR 85692): lazy saves memory, as the model says
    pair = [p.mib for p in ctx.CALIBRATION if "85692" in p.url]
    assert max(pair) - min(pair) > 300


def test_the_published_v100_row_is_calibration_not_validation() -> None:
    """HF's V100 (driver 460.91, CUDA 11.2, eager): 1341 MiB. The eager image is the mean of the two CUDA 11
    wheel points, this row among them, so it lands +10.4 % (not within 5 %): CALIBRATED, not validated. Left
    out, the other CUDA 11 point (RTX 3090, 1.8.2+cu111) predicts +21 %: the evidence does not support 5 %."""
    factors = _f(cuda_runtime="11.2", torch_version="1.10", driver_version="460.91", compute_capability="7.0")
    e = ctx.estimate(factors)
    assert not e.lazy and abs(e.bytes / MiB - 1341) / 1341 <= 0.11
    assert abs(e.bytes - 1341 * MiB) <= e.uncertainty_bytes
    others = [p for p in ctx.CALIBRATION if "huggingface" not in p.url]
    out = ctx.estimate(factors, others)
    assert 0.15 < (out.bytes / MiB - 1341) / 1341 < 0.25
    # ptrblck's "> 1000 MB before 11.7" holds for every pre-11.7 estimate with a modern GPU
    assert e.bytes > 1000 * 10**6


def test_reading_the_factors_creates_no_cuda_context(monkeypatch) -> None:
    def forbidden(*a, **k):
        raise AssertionError("CUDA initialised")

    for name in ("init", "_lazy_init", "mem_get_info", "current_device", "get_device_properties", "device_count"):
        monkeypatch.setattr(torch.cuda, name, forbidden)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(
        ctx, "nvml_driver_version", lambda: FakeNvml([FakeGpu("H100", "GPU-1")]).nvmlSystemGetDriverVersion()
    )
    f = ctx.read_factors("9.0", planned=False, model=nn.Linear(4, 4), environ={})
    assert (f.cuda_runtime, f.module_loading, f.driver_version) == ("12.4", None, "550.54.15")
    assert not torch.cuda.is_initialized()
    assert ctx.estimate(f).basis.startswith("estimate: CUDA 12.4, lazy loading, sm_90, driver 550.54.15")


def test_target_plans_for_this_kernels_torch(monkeypatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(ctx, "nvml_driver_version", lambda: pytest.fail("a target's driver is not this machine's"))
    info = analysis_device.device_limit(target="H100", memory=None, device=None, reserve=None)
    assert info.context_source == "estimate" and info.context_bytes == 544 * MiB
    assert info.context_basis.startswith("estimate: CUDA 12.4, lazy loading, sm_90")
    assert "planned for this kernel's torch" in info.context_basis


def test_a_context_in_use_is_measured(monkeypatch) -> None:
    device = SimpleNamespace(
        cuda_index=0, name="GPU", total=16 << 30, free=10 << 30, this_kernel=600 * MiB, compute_capability="8.9"
    )
    monkeypatch.setattr(analysis_device, "_local_gpu", lambda index: device)
    info = analysis_device.device_limit(target=None, memory=None, device="cuda:0", reserve=None)
    assert (info.context_source, info.context_basis, info.context_bytes) == ("nvml", "measured", 600 * MiB)
