"""The checklist's steps carry the fit advice's figures for the model that failed: the same rows `%gpumem analyze
--advise` shows (analysis.advise), to the byte; the cheapest lever that fits first; a model too large to analyse
while the error is shown gets a step that inserts the analysis instead."""

from __future__ import annotations

import json
import types
from typing import Any, Dict, List, Optional

import jsonschema
import pytest

from gpumem_kernel.oom import figures as figures_module
from gpumem_kernel.oom.analyzed import AnalyzedModel
from gpumem_kernel.oom.bundle import OOM_MIME, checklist_bundle
from gpumem_kernel.oom.figures import SMALL_MODEL_PARAMETERS, STEP_OF_KEY, row_key
from gpumem_kernel.render.units import human
from gpumem_kernel.wire.protocol import load_payload_schema

torch = pytest.importorskip("torch")

from gpumem_kernel.analysis import AnalysisRequest, advise, analyze  # noqa: E402

# A GPU small enough that the small model's step at BATCH does not fit as it is (the CUDA context alone takes
# about half of it), so the advice has levers to show.
CAPACITY = 1100 * 2**20
BATCH = 2**16
OOM = (
    "CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 1100.00 MiB of which 10.00 MiB "
    "is free. Including non-PyTorch memory, this process has 1000.00 MiB memory in use. Of the allocated memory "
    "900.00 MiB is allocated by PyTorch, and 40.00 MiB is reserved by PyTorch but unallocated."
)


def small_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))


def big_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))


def error() -> BaseException:
    """An out-of-memory error raised by no model: the namespace's only model is the one that failed."""
    return torch.OutOfMemoryError(OOM)


def payload(ns: Dict[str, Any], analyzed: Optional[AnalyzedModel] = None, advise_with: Any = None) -> Dict[str, Any]:
    shell = types.SimpleNamespace(user_ns=dict(ns), user_ns_hidden={})
    bundle = checklist_bundle(error(), shell, sample={}, analyzed=analyzed, env={}, advise=advise_with)
    assert bundle is not None
    found = bundle[OOM_MIME]
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(json.loads(json.dumps(found)))
    return {**found, "text/plain": bundle["text/plain"], "text/html": bundle["text/html"]}


def figures(found: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {s["id"]: s["figure"] for s in found["steps"] if s.get("figure") is not None}


def analysed(model: torch.nn.Module, batch: int) -> Any:
    """(request, report, advice) as `%gpumem analyze model -b <batch> --memory 1100MiB --advise` computes them."""
    request = AnalysisRequest(batch_size=batch, memory=CAPACITY)
    report = analyze(model, request)
    return request, report, advise(model, request, report)


@pytest.fixture(scope="module")
def small() -> Any:
    model = small_model()
    assert sum(p.numel() for p in model.parameters()) <= SMALL_MODEL_PARAMETERS
    return (model, *analysed(model, BATCH))


def assert_figures_are_the_rows(shown: Dict[str, Dict[str, Any]], advice: Any, batch: int) -> None:
    rows = [r for r in advice.rows if STEP_OF_KEY.get(row_key(r) or "") is not None]
    assert rows, "the advice has rows the checklist shows"
    assert set(shown) == {STEP_OF_KEY[row_key(r)] for r in rows}
    for row in rows:
        figure = shown[STEP_OF_KEY[row_key(row)]]
        micro = row.changes.get("batch_size", batch)
        assert (figure["peak_bytes"], figure["peak_allocated_bytes"], figure["maximum"], figure["status"]) == (
            row.peak_bytes,
            row.peak_allocated_bytes,
            row.maximum,
            row.status,
        )
        assert figure["batch"] == micro and figure["flags"] == row.flags
        assert figure["text"].startswith(f"{row.lever}: peak {human(row.peak_bytes)} → ")
        assert figure["fits"] is row.fits


def test_the_last_analysis_advice_for_the_failed_model_is_on_its_steps_to_the_byte(small: Any) -> None:
    model, _, report, advice = small
    record = AnalyzedModel.of(model, report, advice)

    found = payload({"model": model, "batch_size": BATCH}, record)

    shown = figures(found)
    assert_figures_are_the_rows(shown, advice, BATCH)
    assert {f["source"] for f in shown.values()} == {"last-analysis"}
    assert "fit-advice" not in [s["id"] for s in found["steps"]]
    for figure in shown.values():
        assert f"      {figure['text']}" in found["text/plain"].splitlines()
        assert figure["text"] in found["text/html"]


def test_a_small_model_without_an_analysis_gets_the_advice_computed_for_this_error(
    small: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, request, _, advice = small
    monkeypatch.setattr(figures_module, "INLINE_SECONDS", 10_000.0)  # this machine's speed is not under test
    asked: List[Dict[str, Any]] = []

    def fit_advice(model: Any, **fields: Any) -> Any:
        asked.append(fields)
        request = AnalysisRequest(**fields)
        return advise(model, request, analyze(model, request))

    shown = figures(payload({"model": model, "batch_size": BATCH}, None, fit_advice))

    # the request is the one `%gpumem analyze model -b 65536 --memory 1100MiB --advise` makes: the same figures
    assert [{k: v for k, v in fields.items() if k != "on_progress"} for fields in asked] == [
        {"batch_size": BATCH, "memory": CAPACITY, "amp": None}
    ]
    assert AnalysisRequest(**asked[0]) == request
    assert_figures_are_the_rows(shown, advice, BATCH)
    assert {f["source"] for f in shown.values()} == {"computed"}


def test_an_analysis_of_another_model_puts_none_of_its_figures_on_the_steps(small: Any) -> None:
    _, _, report, advice = small
    other = small_model()  # the same class and size, but analysed as a different parameter count
    record = AnalyzedModel(report.recommendations.recommended, "Sequential", 1, None, advice, 16)

    found = payload({"model": other, "batch_size": BATCH}, record)

    assert figures(found) == {}
    assert "fit-advice" in [s["id"] for s in found["steps"]]  # no computation handed in: the step that runs it


def fake_row(lever: str, changes: Dict[str, Any], peak: int, status: str, maximum: int) -> Any:
    return types.SimpleNamespace(
        lever=lever,
        flags="--x",
        cost="",
        changes=changes,
        peak_bytes=peak,
        peak_allocated_bytes=peak - 2**20,
        maximum=maximum,
        status=status,
    )


def fake_advice(eight_bit: str, amp: str, checkpointing: str) -> Any:
    """Rows in the advice's order (cheapest first), each fitting or not as given."""
    gib = 2**30
    return types.SimpleNamespace(
        peak_bytes=20 * gib,
        status="will-not-fit",
        rows=[
            fake_row("8-bit optimizer", {"optimizer": "adamw8bit"}, 18 * gib, eight_bit, 12),
            fake_row("AMP bf16", {"amp": "bf16"}, 15 * gib, amp, 20),
            fake_row("smaller micro-batch", {"batch_size": 8, "grad_accum": 2}, 17 * gib, "will-not-fit", 6),
            fake_row("gradient checkpointing", {"checkpointing": True}, 9 * gib, checkpointing, 40),
        ],
    )


def applicable(found: Dict[str, Any]) -> List[str]:
    return [s["id"] for s in found["steps"] if s.get("not_applicable") is None]


@pytest.mark.parametrize(
    "fits, first",
    [
        (("fits", "fits", "fits"), "8bit-optimizer"),
        (("will-not-fit", "fits", "fits"), "mixed-precision"),
        (("will-not-fit", "will-not-fit", "tight"), "grad-checkpointing"),
    ],
)
def test_the_cheapest_lever_that_fits_comes_first(fits: Any, first: str) -> None:
    model = small_model()
    record = AnalyzedModel(None, "Sequential", sum(p.numel() for p in model.parameters()), None, fake_advice(*fits), 16)

    found = payload({"model": model, "batch_size": 16}, record)

    assert applicable(found)[0] == first
    by_id = {s["id"]: s for s in found["steps"]}
    assert by_id["grad-accumulation"]["figure"]["text"] == (
        "smaller micro-batch: peak 17.00 GiB → does not fit at micro-batch 8 × 2 accumulated (at most 6)"
    )
    assert by_id["8bit-optimizer"]["action"] == "insert-cell"  # shown only with its figure


@pytest.mark.parametrize(
    "status, maximum, said",
    [
        ("fits", 24, "AMP bf16: peak 15.00 GiB → fits at batch 16 (up to 24)"),
        ("tight", 16, "AMP bf16: peak 15.00 GiB → fits, tightly, at batch 16 (up to 16)"),
        ("will-not-fit", 12, "AMP bf16: peak 15.00 GiB → does not fit at batch 16 (at most 12)"),
        ("will-not-fit", 0, "AMP bf16: peak 15.00 GiB → does not fit at batch 16 (not even 1 fits)"),
        ("unknown", None, "AMP bf16: peak 15.00 GiB at batch 16 (no memory limit known to compare with)"),
    ],
)
def test_the_figure_says_the_rows_peak_status_and_largest_batch(status: str, maximum: Any, said: str) -> None:
    advice = fake_advice("will-not-fit", status, "will-not-fit")
    advice.rows[1].maximum = maximum

    found = payload({"model": small_model(), "batch_size": 16}, record_of(advice))

    assert figures(found)["mixed-precision"]["text"] == said


def test_a_row_without_a_traced_peak_puts_no_figure_on_its_step() -> None:
    advice = fake_advice("fits", "fits", "fits")
    advice.rows[1].peak_bytes = None

    shown = figures(payload({"model": small_model(), "batch_size": 16}, record_of(advice)))

    assert "mixed-precision" not in shown and "grad-checkpointing" in shown


def test_with_no_lever_that_fits_the_order_is_the_usual_one() -> None:
    model = small_model()
    record = AnalyzedModel(
        None, "Sequential", sum(p.numel() for p in model.parameters()), None, fake_advice(*["will-not-fit"] * 3), 16
    )
    without = payload({"model": model, "batch_size": 16}, None)

    found = payload({"model": model, "batch_size": 16}, record)

    assert [i for i in applicable(found) if i != "8bit-optimizer"] == [
        i for i in applicable(without) if i != "fit-advice"
    ]
    assert figures(found)["grad-checkpointing"]["fits"] is False


def test_a_large_model_gets_a_step_that_inserts_the_analysis_and_is_not_analysed_now() -> None:
    model = big_model()
    assert sum(p.numel() for p in model.parameters()) > SMALL_MODEL_PARAMETERS

    def fit_advice(model: Any, **fields: Any) -> Any:
        raise AssertionError("the checklist analysed a large model while the error was shown")

    found = payload({"net": model, "batch_size": 32}, None, fit_advice)

    step = next(s for s in found["steps"] if s["id"] == "fit-advice")
    assert figures(found) == {}
    assert step["action"] == "insert-cell"
    assert step["code"] == f"%gpumem analyze net -b 32 --memory {CAPACITY} --advise"
    assert applicable(found).index("fit-advice") < applicable(found).index("batch-size")


def test_advice_that_takes_too_long_is_given_up_for_the_step_that_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(figures_module, "INLINE_SECONDS", 0.0)
    heard: List[Any] = []

    def fit_advice(model: Any, **fields: Any) -> Any:
        heard.append("trace")
        fields["on_progress"](None)  # the analysis tells its progress at each trace: past the budget, it stops
        raise AssertionError("the analysis went on past the budget")

    found = payload({"model": small_model(), "batch_size": 16}, None, fit_advice)

    assert heard == ["trace"] and figures(found) == {}
    step = next(s for s in found["steps"] if s["id"] == "fit-advice")
    assert step["code"] == f"%gpumem analyze model -b 16 --memory {CAPACITY} --advise"


@pytest.mark.parametrize("model", [small_model(), big_model()])
def test_a_host_memory_error_gets_no_device_advice(model: torch.nn.Module) -> None:
    asked: List[Any] = []

    def fit_advice(model: Any, **fields: Any) -> Any:
        asked.append(fields)  # the host ran out of RAM: the device's levers do not apply
        raise RuntimeError("not asked")

    shell = types.SimpleNamespace(user_ns={"model": model, "batch_size": 16}, user_ns_hidden={})
    error = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")
    bundle = checklist_bundle(error, shell, sample={}, env={}, advise=fit_advice)

    assert bundle is not None and bundle[OOM_MIME]["info"]["family"] == "host"
    assert asked == [] and "fit-advice" not in [s["id"] for s in bundle[OOM_MIME]["steps"]]


def test_without_a_batch_size_nothing_is_computed_nor_offered() -> None:
    def fit_advice(model: Any, **fields: Any) -> Any:
        raise AssertionError("no batch: nothing to analyse")

    found = payload({"model": small_model()}, None, fit_advice)

    assert figures(found) == {} and "fit-advice" not in [s["id"] for s in found["steps"]]


def test_a_model_the_analysis_cannot_trace_leaves_the_checklist_as_it_was() -> None:
    def fit_advice(model: Any, **fields: Any) -> Any:
        raise RuntimeError("cannot trace")

    found = payload({"model": small_model(), "batch_size": 16}, None, fit_advice)

    assert figures(found) == {} and "fit-advice" not in [s["id"] for s in found["steps"]]


def test_the_figure_is_strict_in_the_schema() -> None:
    model = small_model()
    record = AnalyzedModel(
        None, "Sequential", sum(p.numel() for p in model.parameters()), None, fake_advice(*["fits"] * 3), 16
    )
    found = payload({"model": model, "batch_size": 16}, record)
    found = {k: v for k, v in found.items() if not k.startswith("text/")}
    step = next(s for s in found["steps"] if s.get("figure"))
    validator = jsonschema.Draft202012Validator(load_payload_schema("oom"))
    step["figure"]["extra"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(json.loads(json.dumps(found)))
    del step["figure"]["extra"]
    step["figure"]["status"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(json.loads(json.dumps(found)))


def test_after_analyze_advise_the_handler_puts_the_payloads_advice_rows_on_the_steps() -> None:
    """The loaded extension end to end: `%gpumem analyze --advise` of the model, then an out-of-memory error in a
    step that runs it; the checklist's figures are the analysis payload's advice rows."""
    from IPython.utils.capture import capture_output

    from conftest import gpumem_shell
    from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME

    def run(ip: Any, code: str) -> Any:
        with capture_output() as captured:
            ip.run_cell(code)
        return captured

    with gpumem_shell({"net": small_model(), "torch": torch}) as ip:
        shown = run(ip, f"%gpumem analyze net -b {BATCH} --memory {CAPACITY} --advise").outputs[0].data
        rows = shown[ANALYSIS_MIME]["advice"]["rows"]
        step = f"def train_step(model):\n    raise torch.OutOfMemoryError({OOM!r})\n"
        captured = run(ip, f"batch_size = {BATCH}\n{step}train_step(net)")

    found = captured.outputs[0].data[OOM_MIME]
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(found)
    on_steps = {f["key"]: f for f in figures(found).values()}
    expected = {r["key"]: r for r in rows if r["key"] in STEP_OF_KEY}
    assert expected and set(on_steps) == set(expected)
    for key, row in expected.items():
        figure = on_steps[key]
        assert (figure["peak_bytes"], figure["maximum"], figure["status"], figure["fits"]) == (
            row["peak_bytes"],
            row["maximum"],
            row["status"],
            row["fits"],
        )
        assert figure["source"] == "last-analysis"


def record_of(advice: Any) -> AnalyzedModel:
    model = small_model()
    return AnalyzedModel(None, "Sequential", sum(p.numel() for p in model.parameters()), None, advice, 16)


def test_the_advices_own_pick_comes_first_when_it_is_a_step() -> None:
    advice = fake_advice("will-not-fit", "fits", "fits")
    advice.recommended = 3  # the advice's reason picked checkpointing (say, AMP needs an Ampere GPU)

    found = payload({"model": small_model(), "batch_size": 16}, record_of(advice))

    assert applicable(found)[0] == "grad-checkpointing"


def test_a_picked_combination_with_no_step_leaves_the_first_lever_that_fits_first() -> None:
    advice = fake_advice("will-not-fit", "fits", "fits")
    both = fake_row("AMP bf16 + gradient checkpointing", {"amp": "bf16", "checkpointing": True}, 2**30, "fits", 64)
    advice.rows.append(both)
    advice.recommended = len(advice.rows) - 1

    found = payload({"model": small_model(), "batch_size": 16}, record_of(advice))

    assert row_key(both) == "amp-bf16+checkpointing"
    assert applicable(found)[0] == "mixed-precision"
    assert {f["key"] for f in figures(found).values()} == {"8bit-optimizer", "amp-bf16", "micro-batch", "checkpointing"}
