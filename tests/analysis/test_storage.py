"""The one storage tracker: the simulated device's cap (autobatch, benchmark) and the estimator's event stream
(analysis.trace.run) count the same storages the same way."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpumem_kernel.analysis.allocator.storage import NullTracker, SimulatedOOM, make_tracker, register_states  # noqa: E402
from gpumem_kernel.analysis.trace.tracker import trace_tracker_class  # noqa: E402
from gpumem_kernel.oom.classify import is_oom  # noqa: E402


def test_simulated_oom_looks_like_cuda_and_stops_at_the_cap():
    tracker = make_tracker(cap=4096)
    with pytest.raises(SimulatedOOM) as caught:
        with tracker:
            keep = torch.zeros(512)  # 2 KiB: fits
            torch.zeros(1024)  # 4 KiB more: over
    tracker.close()
    assert isinstance(caught.value, RuntimeError) and is_oom(caught.value)
    assert "CUDA out of memory" in str(caught.value) and "simulated" in str(caught.value)
    assert "Tried to allocate 0.00 MiB; 0.00 MiB of the 0.00 MiB simulated cap" in str(caught.value)
    assert tracker.peak == 2048 and keep.numel() == 512


def test_live_bytes_follow_frees_views_and_in_place_resizes():
    tracker = make_tracker()
    with tracker:
        a = torch.zeros(256)  # 1 KiB
        view = a[:10]  # same storage: no new bytes
        b = torch.ones(512)  # 2 KiB
        assert tracker.live == 3072 and view.numel() == 10
        del b
        assert tracker.live == 1024
        a.resize_(1024)  # grown in place: a new allocation of the new size
        assert tracker.live == 4096
    tracker.close()
    assert tracker.peak == 4096
    kinds = [kind for kind, _ in tracker.events]
    assert kinds == ["alloc", "alloc", "free", "free", "alloc"]  # the resize frees the old size


def test_registered_states_count_once_and_the_baseline_check_uses_them():
    model = torch.nn.Linear(64, 64)  # 16.25 KiB of parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, 64)).sum().backward()
    optimizer.step()
    tracker = make_tracker(cap=1024)
    register_states(tracker, model, optimizer)
    register_states(tracker, model, optimizer)  # again: nothing new
    assert tracker.live == 3 * (64 * 64 + 64) * 4  # parameters, gradients, momentum buffers
    with pytest.raises(SimulatedOOM, match="the model's states alone"):
        tracker.check_baseline()
    tracker.close()


def test_the_estimator_tracker_is_the_same_tracker_with_markers():
    tracker = trace_tracker_class()()
    assert isinstance(tracker, type(make_tracker()))  # the storage bookkeeping is the one tracker's
    with tracker:
        with tracker.span("forward", 1, 0):
            x = torch.ones(4, 8)  # 128 B
            weight = torch.ones(8, 8)  # 256 B
            y = torch.nn.functional.linear(x, weight)  # 128 B, through cuBLAS on CUDA
        tracker.register(y, "activation")
    tracker.close()
    assert [m.kind for m in tracker.markers] == ["cublas"]
    assert tracker.role_of(y) == "activation" and tracker.live == tracker.peak == 512
    assert tracker.spans[(1, 0, "forward")][0] == 0


def test_the_null_tracker_takes_every_call():
    tracker = NullTracker()
    with tracker, tracker.span("forward", 1, 0):
        tracker.register(torch.ones(1), "input", check=True)
        tracker.check_baseline()
    tracker.close()
    assert tracker.peak == 0
