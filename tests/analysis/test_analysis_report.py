"""The report: schema-valid payloads, the MIME bundle (escaped HTML, the analysis guide's text), the batch-size search,
recommendations, distributed figures and the Python API for scripts."""

import json
from importlib import resources
from typing import Any, Callable, Dict, Optional

import pytest

torch = pytest.importorskip("torch")
jsonschema = pytest.importorskip("jsonschema")
nn = torch.nn

from gpumem_kernel.analysis.pipeline import device as analysis_device  # noqa: E402
from gpumem_kernel.analysis.gpus import lookup as gpus  # noqa: E402
from gpumem_kernel.analysis.search import recommendations  # noqa: E402
from gpumem_kernel.analysis.pipeline.analyze import analyze, print_memory_analysis, recommend_batch_size  # noqa: E402
from gpumem_kernel.analysis.search.engines import Point  # noqa: E402
from gpumem_kernel.analysis.report.report import AnalysisReport  # noqa: E402
from gpumem_kernel.analysis.search.max_batch import SEED, search_maximum  # noqa: E402
from gpumem_kernel.analysis.report.picks import Rounding  # noqa: E402
from gpumem_kernel.analysis.report.render import MIME, analysis_bundle  # noqa: E402

GiB = 1 << 30


@pytest.fixture(scope="module")
def schema() -> Any:
    text = resources.files("gpumem_kernel").joinpath("wire/schemas/analysis.schema.json").read_text()
    value = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(value)
    return value


def _mlp() -> Any:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def _validate(report: AnalysisReport, schema: Any) -> dict:
    payload = json.loads(json.dumps(analysis_bundle(report)[MIME]))
    jsonschema.Draft202012Validator(schema).validate(payload)
    return payload


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"target": "RTX 4080 Super", "amp": "bf16", "optimizer": "adam"},
        {"memory": "8GiB", "optimizer": "sgd-momentum", "grad_accum": 4, "effective_batch": 256, "multiple": 8},
        {"target": "A100 80GB", "world_size": 8, "strategy": "zero3", "amp": "fp16"},
        {"target": "T4", "world_size": 2, "strategy": "ddp", "checkpointing": True},
    ],
    ids=["no-device", "4080s-bf16", "memory-accum", "a100-zero3", "t4-ddp"],
)
def test_payload_validates_against_the_schema(options: dict, schema: Any) -> None:
    payload = _validate(analyze(_mlp(), batch_size=32, **options), schema)
    for key in ("parameters_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "peak_bytes"):
        assert isinstance(payload[key], int)
    assert payload["engine"] == "traced"
    assert {f["name"] for f in payload["figures"]} >= {"parameters", "activations", "peak", "context"}
    with pytest.raises(jsonschema.ValidationError):  # strict: no unknown fields
        jsonschema.Draft202012Validator(schema).validate({**payload, "surprise": 1})


def test_would_it_fit_on_a_4080_super_at_batch_32_with_adamw_and_bf16() -> None:
    report = analyze(_mlp(), batch_size=32, target="RTX 4080 Super", optimizer="adamw", amp="bf16")
    recs = report.recommendations
    assert report.engine == "traced" and report.device.source == "target"
    assert recs.current.status == "fits"
    assert recs.maximum is not None and recs.maximum > 32 and not recs.extrapolated
    assert recs.safe < recs.recommended <= recs.maximum
    assert recs.recommended & (recs.recommended - 1) == 0  # power of two by default
    assert report.error_bound.relative > 0 and "±" in report.error_bound.statement
    top = max(report.curve, key=lambda p: p.batch_size)
    assert top.batch_size >= recs.maximum  # the maximum was traced, not read off a line
    fitting = [p for p in report.curve if p.batch_size == recs.maximum]
    assert fitting and fitting[0].peak_bytes <= report.device.limit_bytes


def test_amp_saving_is_traced_against_fp32_weights_and_not_claimed_for_bf16_ones() -> None:
    """Without AMP an fp32 model trains in fp32: the saving is traced. A model whose weights are bf16 already
    trains in bf16 without AMP, so there is no "vs fp32" saving to report: the report says why instead."""

    def wide() -> Any:  # activations large enough to outweigh autocast's weight copies
        return nn.Sequential(nn.Linear(512, 4096), nn.ReLU(), nn.Linear(4096, 512))

    fp32 = analyze(wide(), batch_size=1024, amp="bf16")
    assert fp32.amp_saved_bytes is not None and fp32.amp_saved_bytes > 0
    assert not any("AMP's saving is not traced" in n for n in fp32.notes)
    half = analyze(wide().to(torch.bfloat16), batch_size=1024, amp="bf16")
    assert half.amp_saved_bytes is None
    assert any("weights are bfloat16 already" in n for n in half.notes)
    assert "Memory Saved" not in analysis_bundle(half)["text/plain"]


def _figure(report: AnalysisReport, name: str) -> int:
    return next(f.bytes or 0 for f in report.figures if f.name == name)


def test_workspaces_are_the_target_gpus_under_this_torch(monkeypatch: Any) -> None:
    """cuBLAS keeps 32 MiB per thread on an H100 and 8 MiB on an RTX 4090; cuBLASLt keeps its own 1 MiB on the
    forward thread (the MLP's nn.Linear) where this torch separates the two (2.9 to 2.11, or when told to)."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", raising=False)
    lt = gpus.blas_workspaces("9.0", torch.__version__, {}).lt
    h100 = analyze(_mlp(), batch_size=32, target="H100")
    rtx = analyze(_mlp(), batch_size=32, target="RTX 4090")
    assert _figure(h100, "cublas_workspace") == 2 * 32 * (1 << 20) + lt  # the forward thread's and autograd's
    assert _figure(rtx, "cublas_workspace") == 2 * 8_519_680 + lt
    monkeypatch.setenv("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "0")  # Lt keeps its own 1 MiB on the forward thread
    separate = 1 << 20 if gpus.blas_workspaces("8.9", torch.__version__, {}).lt_per_call == 0 else 0
    assert _figure(analyze(_mlp(), batch_size=32, target="RTX 4090"), "cublas_workspace") == 2 * 8_519_680 + separate


def test_expandable_segments_change_the_reserved_prediction_and_say_so(monkeypatch: Any) -> None:
    def wide() -> Any:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(1024, 3000), nn.ReLU(), nn.Linear(3000, 1024))

    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    default = analyze(wide(), batch_size=256, target="RTX 4090")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True,garbage_collection_threshold:0.6")
    expandable = analyze(wide(), batch_size=256, target="RTX 4090")
    # every rest of 512 B or more is split off, where the default hands out a large block's rest of up to 1 MiB
    assert _figure(expandable, "peak_allocated") <= _figure(default, "peak_allocated")
    assert _figure(expandable, "peak_reserved") != _figure(default, "peak_reserved")
    assert any("expandable segments" in n for n in expandable.notes)
    assert any("garbage_collection_threshold" in n for n in expandable.notes)
    assert not any("expandable segments" in n for n in default.notes)


def test_bundle_html_is_escaped_and_text_follows_seed_000() -> None:
    hostile = type("<img src=x onerror=alert(1)>", (nn.Sequential,), {})
    model = hostile(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    bundle = analysis_bundle(analyze(model, batch_size=4, target="RTX 3060", loss=lambda out, batch: out.sum()))
    assert "<img" not in bundle["text/html"] and "&lt;img src=x" in bundle["text/html"]
    text = bundle["text/plain"]
    headings = [  # a page without the labextension shows them: no emoji its fonts may lack
        "Memory Analysis",
        "GPU Memory:",
        "Model Memory:",
        "Batch Memory (batch_size=4):",
        "Total Estimated Usage",
        "Batch Size Recommendations:",
        "Settings:",
    ]
    positions = [text.index(h) for h in headings]
    assert positions == sorted(positions)
    for label in ("Maximum:", "Recommended:", "Safe:", "Current:", "Mixed Precision:", "Engine:"):
        assert label in text


def test_marimo_shows_the_reports_escaped_html_alone() -> None:
    """marimo shows what `_mime_` gives (the bundle would be offered type by type, our JSON as unsupported)."""
    hostile = type("<img src=x onerror=alert(1)>", (nn.Sequential,), {})
    report = analyze(hostile(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)), batch_size=4)
    mime, shown = report._mime_()
    assert mime == "text/html"
    assert analysis_bundle(report)["text/html"] in shown and "<img" not in shown


class _Synthetic:
    """An engine whose footprint is a given function of the batch; None above `oom_above` (like an OOM)."""

    name = "traced"

    def __init__(self, footprint: Callable[[int], int], oom_above: Optional[int] = None) -> None:
        self.footprint, self.oom_above, self.calls = footprint, oom_above, []

    def point(self, batch: int) -> Optional[Point]:
        self.calls.append(batch)
        if self.oom_above is not None and batch > self.oom_above:
            return None
        value = self.footprint(batch)
        return Point(batch, value, value, value, "traced")


def test_search_finds_the_maximum_of_a_line_and_of_a_convex_curve() -> None:
    line = search_maximum(_Synthetic(lambda b: 1000 + 10 * b), 2000)
    assert line.maximum == 100 and not line.extrapolated
    convex = search_maximum(_Synthetic(lambda b: max(3000, 1000 + 10 * b)), 5000)
    assert 398 <= convex.maximum <= 400  # within 0.5%: the model-state plateau does not mislead it
    assert convex.fit is not None and convex.fit.points == len(convex.points)
    far = search_maximum(_Synthetic(lambda b: 10**6 + 3 * b), 10**6 + 3 * 250_000)
    assert 250_000 * 0.995 <= far.maximum <= 250_000 and not far.extrapolated


def test_search_never_extrapolates_silently() -> None:
    engine = _Synthetic(lambda b: 1000 + 10 * b)
    found = search_maximum(engine, 100_000_000, runs=3)  # out of runs before anything went over
    assert found.extrapolated and found.maximum > max(engine.calls) and "extrapolated" in found.note
    assert len(engine.calls) == 3


def test_search_handles_ooms_and_batches_that_do_not_fit() -> None:
    ooming = search_maximum(_Synthetic(lambda b: 100 * b, oom_above=20), 10**9)
    assert ooming.maximum == 20 and "batch 21 ran out of memory" in ooming.note
    too_big = search_maximum(_Synthetic(lambda b: 5000 + b), 1000)
    assert too_big.maximum == 0 and "does not fit" in too_big.note
    unlimited = search_maximum(_Synthetic(lambda b: b), None)
    assert unlimited.maximum is None


def test_where_the_first_batch_is_over_batch_1_runs_next_and_the_line_through_both_aims() -> None:
    """A large model's few samples: nothing fits after two runs, not four halvings down to batch 1; where batch 1
    fits, the line through it and the first batch lands on the maximum, and the answer is the one bisection gives."""
    nothing = _Synthetic(lambda b: 5000 + b)
    assert search_maximum(nothing, 1000).maximum == 0 and nothing.calls == [SEED, 1]
    for per_sample, limit in ((1000, 3500), (700, 4000), (1000, 8999)):
        engine = _Synthetic(lambda b, slope=per_sample: 1000 + slope * b + (b * 7919) % 97)
        found = search_maximum(engine, limit)
        exact = max(b for b in range(1, SEED) if engine.footprint(b) <= limit)
        assert found.maximum == exact, (per_sample, limit)
        assert engine.calls[:2] == [SEED, 1] and len(engine.calls) <= 5, engine.calls


def test_a_batch_1_that_cannot_run_does_not_end_the_search_while_batch_2_may_fit() -> None:
    """BatchNorm cannot train on one sample: batch 1 counts as over only once batch 2 is over too."""
    engine = _Synthetic(lambda b: 1000 * b)
    engine.point = lambda b, run=engine.point: None if b == 1 else run(b)  # type: ignore[method-assign]
    assert search_maximum(engine, 3500).maximum == 3
    assert search_maximum(engine, 1500).maximum == 0


def test_the_search_runs_the_same_batches_whatever_was_analysed() -> None:
    """The maximum is the model's: the search starts from the same batch for every -b (it used to start at
    -b and 2x -b and stop within 1-3%, so -b 8 and -b 2048 gave different maxima)."""
    footprint = _Synthetic(lambda b: 50_000 + 37 * b + (b * 7919) % 1000)  # a line with allocator-like noise
    first = search_maximum(footprint, 1_000_000)
    footprint.calls.clear()
    for analysed in (1, 8, 2048):
        footprint.point(analysed)  # the analysed batch is traced first and cached by the engine
    second = search_maximum(footprint, 1_000_000)
    assert first.maximum == second.maximum
    assert [p.batch_size for p in first.points] == [p.batch_size for p in second.points]


def test_rounding_recommendations_and_status() -> None:
    assert [Rounding().apply(v) for v in (307.2, 205, 1.5, 0.4)] == [256, 128, 1, 0]
    assert [Rounding(multiple=8).apply(v) for v in (307.2, 205, 5)] == [304, 200, 5]
    assert [Rounding(exact=True).apply(v) for v in (307.2, 205, 1.5, 0.4)] == [307, 205, 1, 0]
    current = Point(64, 0, 0, 95 * GiB // 10, "traced")
    recs = recommendations.recommend(
        512,
        current,
        10 * GiB,
        GiB,
        batch_size=64,
        grad_accum=2,
        effective_batch=None,
        rounding=Rounding(),
        extrapolated=False,
        note="",
    )
    assert (recs.maximum, recs.recommended, recs.safe) == (512, 256, 128)
    assert recs.current.status == "tight"
    assert recs.accumulation.target_effective_batch == 128 and recs.accumulation.recommended == 1
    assert recs.lr.linear == 2.0 and abs(recs.lr.sqrt - 2**0.5) < 1e-9
    same = recommendations.recommend(
        512,
        current,
        10 * GiB,
        GiB,
        batch_size=64,
        grad_accum=8,
        effective_batch=None,
        rounding=Rounding(),
        extrapolated=False,
        note="",
    )
    assert same.accumulation.recommended == 2 and same.lr.linear == 1.0 and "keep" in same.lr.hint
    big = recommendations.recommend(
        512,
        current,
        10 * GiB,
        GiB,
        batch_size=64,
        grad_accum=1,
        effective_batch=1024,
        rounding=Rounding(),
        extrapolated=False,
        note="",
    )
    assert big.accumulation.recommended == 4 and big.lr.to_effective_batch == 1024 and big.lr.linear == 16
    small = recommendations.recommend(
        512,
        current,
        10 * GiB,
        GiB,
        batch_size=64,
        grad_accum=1,
        effective_batch=128,
        rounding=Rounding(),
        extrapolated=False,
        note="",
    )
    assert small.accumulation.recommended == 1 and small.lr.to_effective_batch == 128  # capped to the target


def test_distributed_strategies_shrink_per_rank_model_states() -> None:
    # rank 0 traced as PyTorch's wrappers run it (analysis.trace.ranks): its figures at its peak
    single = analyze(_mlp(), batch_size=16, target="A100 40GB")
    ddp = analyze(_mlp(), batch_size=16, target="A100 40GB", world_size=4, strategy="ddp")
    zero2 = analyze(_mlp(), batch_size=16, target="A100 40GB", world_size=4, strategy="zero2")
    zero3 = analyze(_mlp(), batch_size=16, target="A100 40GB", world_size=4, strategy="zero3")
    assert {r.distributed.engine for r in (ddp, zero2, zero3)} == {"traced"}
    assert ddp.distributed.extra_bytes == single.gradients_bytes  # DDP's bucket copy of the gradients
    # a quarter each, and FSDP's padding of each shard to an even split
    assert single.optimizer_bytes // 4 <= zero2.distributed.optimizer_bytes <= single.optimizer_bytes * 0.3
    assert single.parameters_bytes // 4 <= zero3.distributed.parameters_bytes <= single.parameters_bytes * 0.3
    assert zero3.peak_allocated_bytes < single.peak_allocated_bytes < ddp.peak_allocated_bytes


def test_per_rank_figures_by_formula_where_a_rank_is_not_traced() -> None:
    model = _mlp()
    optimizer = torch.optim.AdamW(model.parameters())  # an optimizer object: no rank wrapper builds it here
    single = analyze(model, batch_size=16, target="A100 40GB", optimizer=optimizer)
    zero2 = analyze(model, batch_size=16, target="A100 40GB", world_size=4, strategy="zero2", optimizer=optimizer)
    assert zero2.distributed.engine == "formula"
    assert any(n.startswith("per-rank figures by the formula (a rank's step was not traced") for n in zero2.notes)
    assert zero2.distributed.optimizer_bytes == single.optimizer_bytes // 4
    assert zero2.distributed.gradients_bytes == single.gradients_bytes // 4
    assert zero2.distributed.activations_bytes == single.activations_bytes  # activations are not sharded


def test_seed_api(capsys: Any) -> None:
    picks = recommend_batch_size(_mlp(), gpu_memory_gb=2, mixed_precision=True)
    assert set(picks) >= {"maximum", "recommended", "safe"} and picks["maximum"] > picks["recommended"] > 0
    seed_style = recommend_batch_size(_mlp(), gpu_memory_gb=2, safety_margin=0.7)  # the analysis guide: "use 70%"
    assert seed_style["maximum"] < picks["maximum"]
    report = print_memory_analysis(_mlp(), batch_size=32, device_id=0, mixed_precision=False)
    assert "💾 Memory Analysis" in capsys.readouterr().out and isinstance(report, AnalysisReport)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_measured_engine_on_a_gpu_and_the_traced_prediction() -> None:  # pragma: no cover - GPU only
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    before = [p.detach().clone() for p in model.parameters()]
    rng = torch.cuda.get_rng_state()
    measured = analyze(model, batch_size=64, optimizer=optimizer, device="cuda:0")
    try:  # planned for this GPU: its cuBLAS workspaces (32 MiB per thread on sm_90) are a fifth of this model's step
        where: Dict[str, Any] = {"target": gpus.lookup(torch.cuda.get_device_name(0)).name}
    except ValueError:
        where = {"memory": measured.device.total_bytes}
    planned = analyze(model, batch_size=64, optimizer=optimizer, **where)
    assert measured.engine == "measured" and planned.engine == "traced"
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert torch.equal(rng, torch.cuda.get_rng_state()) and not optimizer.state
    assert abs(planned.peak_allocated_bytes - measured.peak_allocated_bytes) <= 0.10 * measured.peak_allocated_bytes
    assert measured.recommendations.maximum and measured.fit is not None


def test_local_gpu_limit_counts_other_processes_and_the_context(monkeypatch: Any) -> None:
    from types import SimpleNamespace

    device = SimpleNamespace(
        cuda_index=0,
        name="NVIDIA GeForce RTX 4080 SUPER",
        total=16 * GiB,
        free=10 * GiB,
        this_kernel=None,
        compute_capability="8.9",
    )
    monkeypatch.setattr(analysis_device, "_local_gpu", lambda index: device)
    fresh = analysis_device.device_limit(target=None, memory=None, device=None, reserve=None)
    assert (fresh.source, fresh.free_bytes, fresh.context_source) == ("nvml", 10 * GiB, "estimate")
    assert fresh.limit_bytes == 10 * GiB - int(0.05 * 16 * GiB) and fresh.context_to_add > 0
    device.this_kernel = 600 << 20  # this kernel already has a context: measured, not added again
    used = analysis_device.device_limit(target=None, memory=None, device="cuda:0", reserve=GiB)
    assert (used.context_bytes, used.context_source, used.context_to_add) == (600 << 20, "nvml", 0)
    assert used.limit_bytes == 9 * GiB
    report = analyze(_mlp(), batch_size=16)
    assert report.device.source == "nvml" and report.recommendations.maximum
