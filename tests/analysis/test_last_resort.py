"""The last resort: a batch fits when the allocator's replay under the device's limit does, as the real allocator frees
its cached segments and retries cudaMalloc before it raises (DeviceCachingAllocator::malloc)."""

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.gpus import lookup as gpus  # noqa: E402
from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.allocator.caching_allocator import replay  # noqa: E402
from gpumem_kernel.analysis.search.engines import TracedEngine, requested_peak  # noqa: E402
from gpumem_kernel.analysis.request.inputs import batch_maker  # noqa: E402
from gpumem_kernel.analysis.model.model_states import Sharding  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

MiB = 1 << 20
BATCH = 1000  # Adam's first step needs new segments while the backward's cached segments are free and whole
CONTEXT = gpus.context_estimate(None)  # --memory alone: the generic context estimate


def _mlp() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))


def _plan(model: Any) -> TracePlan:
    make_batch, _ = batch_maker(model, None, None)
    return TracePlan(model=model, optimizer="adam", make_batch=make_batch, loss_fn=default_loss)


def test_a_fragmented_step_over_the_card_unlimited_fits_after_the_release() -> None:
    model = _mlp()
    unlimited = run_trace(_plan(model), BATCH, fake=True).device.peak_reserved
    memory = CONTEXT + 410 * MiB
    assert unlimited + CONTEXT > memory  # without the last resort: "will not fit"
    payload = analyze(model, batch_size=BATCH, memory=memory, reserve=0).to_payload()
    assert payload["recommendations"]["current"]["status"] != "will-not-fit"
    assert payload["peak_reserved_bytes"] <= 410 * MiB < unlimited  # the replay's peak under the limit
    assert payload["peak_bytes"] <= memory
    assert any(f"batch {BATCH} fits after the allocator frees its cache once" in n for n in payload["notes"])
    assert payload["recommendations"]["maximum"] >= BATCH


def test_a_step_that_does_not_fit_even_after_the_release_keeps_its_unlimited_figures() -> None:
    plan = _plan(_mlp())
    sharding = Sharding(1, None, 0, 0)
    free = TracedEngine(plan, CONTEXT, sharding).point(BATCH)
    tight = TracedEngine(plan, CONTEXT, sharding, CONTEXT + 300 * MiB).point(BATCH)
    assert free is not None and tight is not None
    assert (tight.reserved, tight.footprint, tight.retries) == (free.reserved, free.footprint, 0)
    assert tight.footprint > CONTEXT + 300 * MiB
    assert tight.trace is not None and tight.trace.device.events == []  # the stream is not kept per point


def test_a_stream_asking_more_at_once_than_the_limit_never_fits_under_it() -> None:
    """The bytes the stream's allocations ask for at once bound every allocator's: above them the replay under the
    limit cannot fit, so the engine keeps the unlimited figures without it; between them and the reserved peak it
    is the replay that decides."""
    events = run_trace(_plan(_mlp()), BATCH, fake=True).device.events
    asked = requested_peak(events)
    unlimited = replay(events)
    assert 0 < asked <= unlimited.peak_allocated
    assert not replay(events, limit=asked - 1).fits
    assert replay(events, limit=unlimited.peak_reserved).fits
