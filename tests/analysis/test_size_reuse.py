"""The searches' reuse of traces across sizes (analysis.search.size_reuse): the stream at a batch (or a sequence length)
predicted from two (three) traced ones is the traced stream to the byte, event by event, for an MLP, a CNN and the
tiny Llama; a search that predicts finds the full search's maximum with fewer traces, and a model whose step changes
with the batch is traced as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, List, Tuple

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.gpus import lookup as gpus  # noqa: E402
from gpumem_kernel.analysis.model.model_states import Sharding  # noqa: E402
from gpumem_kernel.analysis.request.inputs import batch_maker  # noqa: E402
from gpumem_kernel.analysis.search import engines  # noqa: E402
from gpumem_kernel.analysis.search.engines import TracedEngine  # noqa: E402
from gpumem_kernel.analysis.search.max_batch import search_maximum  # noqa: E402
from gpumem_kernel.analysis.search.size_reuse import AFFINE, QUADRATIC, SizeFit  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MiB = 1 << 20
CONTEXT = gpus.context_estimate(None)
LLAMA = Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "llama" / "config.json"
NO_SHARDING = Sharding(1, None, 0, 0)


def _mlp_plan() -> TracePlan:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    make_batch, _ = batch_maker(model, (64,), None)
    return TracePlan(model=model, optimizer="adam", make_batch=make_batch, loss_fn=default_loss)


def _cnn_plan() -> TracePlan:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 16, 10),
    )
    make_batch, _ = batch_maker(model, (3, 32, 32), None)
    return TracePlan(model=model, optimizer="sgd", make_batch=make_batch, loss_fn=default_loss, amp="bf16")


def _llama(seq: int = 64) -> Tuple[Any, Callable[[int], Callable[[int, bool], Any]]]:
    """The tiny Llama and make_batch at a sequence length: token ids and labels, so the model computes its loss."""
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(**json.loads(LLAMA.read_text()))
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)

    def at(length: int) -> Callable[[int, bool], Any]:
        def make(batch: int, fake: bool) -> Any:
            ids = torch.randint(0, config.vocab_size, (batch, length))
            return {"input_ids": ids, "labels": ids}

        return make

    return model, at


def _llama_plan() -> TracePlan:
    model, at = _llama()
    return TracePlan(model, "adamw", at(64), default_loss, amp="bf16", checkpointing=True)


PLANS = {"mlp": _mlp_plan, "cnn": _cnn_plan, "llama": _llama_plan}


def _bytes(trace: TraceResult) -> Tuple[List[int], List[int]]:
    """Every storage's bytes and every op marker's (a cuDNN workspace), in the stream's order."""
    return [r.nbytes for r in trace.stream.records], [m.nbytes for m in trace.stream.markers]


def _figures(trace: TraceResult) -> Tuple[Any, ...]:
    return (
        trace.peak_live,
        trace.step_peaks,
        trace.breakdown,
        trace.activations,
        trace.input,
        trace.device.peak_allocated,
        trace.device.peak_reserved,
    )


def _same_stream(predicted: TraceResult, traced: TraceResult) -> None:
    assert _bytes(predicted) == _bytes(traced)
    assert predicted.stream.events == traced.stream.events
    assert predicted.device.events == traced.device.events  # every malloc and free the allocator saw, to the byte
    assert _figures(predicted) == _figures(traced)


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_stream_predicted_at_a_batch_is_the_traced_one_to_the_byte(name: str) -> None:
    plan = PLANS[name]()
    fit = SizeFit(AFFINE)
    for batch in (2, 8):
        assert fit.add(batch, run_trace(plan, batch))
    for batch in (5, 13):
        predicted = fit.predict(batch, plan)
        assert predicted is not None
        _same_stream(predicted, run_trace(plan, batch))


def test_the_stream_predicted_at_a_sequence_length_is_the_traced_one_to_the_byte() -> None:
    model, at = _llama()
    plans = {seq: TracePlan(model, "adamw", at(seq), default_loss, amp="bf16") for seq in (32, 64, 128, 96, 160)}
    fit = SizeFit(QUADRATIC)  # attention's L x L scores: quadratic in the length
    for seq in (32, 64, 128):
        assert fit.add(seq, run_trace(plans[seq], 2))
    for seq in (96, 160):
        predicted = fit.predict(seq, plans[seq])
        assert predicted is not None
        _same_stream(predicted, run_trace(plans[seq], 2))


def _searched(plan: TracePlan, limit: int, reuse: bool) -> Tuple[Any, TracedEngine]:
    engine = TracedEngine(plan, CONTEXT, NO_SHARDING, limit, reuse=reuse)
    engine.point(1)  # the analysed batch, as analyze() traces it first
    return search_maximum(engine, limit), engine


def _points(found: Any) -> List[Tuple[int, int, Any, int]]:
    return [(p.batch_size, p.allocated, p.reserved, p.footprint) for p in found.points]


@pytest.mark.parametrize("name,headroom", [("mlp", 300), ("cnn", 200), ("llama", 60)])
def test_the_search_finds_the_full_searchs_maximum_with_fewer_traces(name: str, headroom: int) -> None:
    plan = PLANS[name]()
    limit = TracedEngine(plan, CONTEXT, NO_SHARDING).point(1).footprint + headroom * MiB
    full, traced_all = _searched(plan, limit, reuse=False)
    reused, predicting = _searched(PLANS[name](), limit, reuse=True)

    assert full.maximum is not None and full.maximum > 8
    assert (reused.maximum, reused.extrapolated, reused.note) == (full.maximum, full.extrapolated, full.note)
    assert _points(reused) == _points(full)  # the curve too: each predicted point is the traced one
    assert predicting.traces < traced_all.traces
    # batch 1 (its own structure for the Llama: no fit through it), the seed and one more to fit through, the
    # maximum and the batch above it, against one trace per candidate
    assert predicting.traces <= 5 < traced_all.traces
    assert full.maximum not in predicting.predicted and full.maximum + 1 not in predicting.predicted


class BatchDependent(nn.Module):
    """A step that takes another path above batch 6 (as a kernel chosen by size would): one more temporary."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, x: Any) -> Any:
        y = self.linear(x)
        if x.shape[0] > 6:
            y = y * torch.ones_like(y)
        return y


def test_a_step_whose_structure_changes_with_the_batch_is_traced_where_it_changes() -> None:
    model = BatchDependent()
    make_batch, _ = batch_maker(model, (64,), None)
    plan = TracePlan(model=model, optimizer="sgd", make_batch=make_batch, loss_fn=default_loss)
    fit = SizeFit(AFFINE)
    for batch in (2, 4):
        fit.add(batch, run_trace(plan, batch))
    assert not fit.add(8, run_trace(plan, 8))  # another structure: not what the fit predicted
    assert fit.predict(16, plan) is None  # one trace of the new structure predicts nothing
    fit.add(12, run_trace(plan, 12))
    _same_stream(fit.predict(16, plan), run_trace(plan, 16))


def _count_traces(monkeypatch: pytest.MonkeyPatch) -> List[int]:
    """The batch of every trace the searches run from now on, in order."""
    traces: List[int] = []
    trace = engines.run_trace

    def counted(plan: TracePlan, batch: int, **options: Any) -> TraceResult:
        traces.append(batch)
        return trace(plan, batch, **options)

    monkeypatch.setattr(engines, "run_trace", counted)
    return traces


def test_the_analysis_reports_the_same_figures_with_fewer_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumem_kernel.analysis.pipeline.analyze import analyze

    traces = _count_traces(monkeypatch)
    payloads = []
    for reuse in (False, True):
        monkeypatch.setattr(engines, "SIZE_REUSE", reuse)
        traces.clear()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
        payload = analyze(model, input=(64,), batch_size=4, memory=CONTEXT + 200 * MiB, reserve=0).to_payload()
        payloads.append((payload, len(traces)))
    (full, full_traces), (reused, reused_traces) = payloads
    for key in ("recommendations", "curve", "peak_bytes", "peak_reserved_bytes", "peak_allocated_bytes"):
        assert reused[key] == full[key]
    assert reused_traces < full_traces


def test_the_sequence_search_reports_the_same_lengths_with_fewer_traces(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from gpumem_kernel.analysis.pipeline.model_source import analyze_named

    config = json.loads(LLAMA.read_text())
    config["vocab_size"] = 32_000  # the logits dominate: memory grows steeply with the sequence
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    traces = _count_traces(monkeypatch)
    found = []
    for reuse in (False, True):
        monkeypatch.setattr(engines, "SIZE_REUSE", reuse)
        traces.clear()
        report = analyze_named(str(path), batch_size=1, memory="2GiB", search="seq", seq_batches="1,4")
        found.append((report.to_payload()["sequence_search"], len(traces)))
    (full, full_traces), (reused, reused_traces) = found
    assert reused == full  # the lengths, the picks, every traced length's footprint, the every-length check
    assert reused_traces < full_traces


def _stream_of(sizes: List[int]) -> Any:
    """A stream of one storage per size, each allocated then freed in order: what SizeFit reads of a trace."""
    from types import SimpleNamespace

    from gpumem_kernel.analysis.allocator.storage import Record
    from gpumem_kernel.analysis.trace.summary import TracedStream

    records = [Record(i, n, "forward", 1, 0, 2 * i, 2 * i + 1) for i, n in enumerate(sizes)]
    events = [event for i in range(len(sizes)) for event in (("alloc", i), ("free", i))]
    return SimpleNamespace(stream=TracedStream(records, events, {(1, 0, "forward"): (0, len(events))}, []))


def test_a_fit_over_the_length_moves_to_another_batch_only_where_each_storage_scales_with_it_or_not_at_all():
    """Bytes of one storage are a product of its dimensions: the same at two batches, or in their ratio. From batch 4's
    fit over the length and both batches' streams at one length, batch 8's stream at any length; a storage of
    batch x length + 7 bytes is neither, and the fit does not move."""

    def sizes(batch: int, length: int, odd: bool = False) -> List[int]:
        kept = [2 * batch * length * length, 3 * length, 4096]  # scores, a position table, a bias
        return kept + ([batch * length + 7] if odd else [])

    for odd in (False, True):
        fit = SizeFit(QUADRATIC)
        for length in (1, 2, 3):
            fit.add(length, _stream_of(sizes(4, length, odd)))
        moved = fit.at_batch(_stream_of(sizes(4, 5, odd)), _stream_of(sizes(8, 5, odd)), 5, (8, 4))
        if odd:
            assert moved is None
        else:
            assert moved is not None and moved.ready() and moved._sizes_at(7) == sizes(8, 7)
    # a stream at batch 8 that the moved fit does not give at its own length: not moved
    fit = SizeFit(QUADRATIC)
    for length in (1, 2, 3):
        fit.add(length, _stream_of(sizes(4, length)))
    assert fit.at_batch(_stream_of(sizes(4, 5)), _stream_of(sizes(8, 5)), 6, (8, 4)) is None
