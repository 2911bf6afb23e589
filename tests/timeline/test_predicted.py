"""The predicted timeline of a real training step (torch on the CPU, the traced engine): every band's allocating
line, the peak against the analysis's own, what is alive at the peak, and ordinary analyze left as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

import timeline_model
from gpumem_kernel.analysis.pipeline.analyze import analyze
from gpumem_kernel.timeline.payload import TIMELINE_MIME, summary_text, timeline_bundle
from gpumem_kernel.timeline.predicted import option_problem, predict, predict_timeline

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas" / "timeline.schema.json").read_text()
)
HELPER = os.path.abspath(timeline_model.__file__)
OPTIONS = dict(batch_size=64, input=(256,), loss=timeline_model.loss)


@pytest.fixture(scope="module")
def timeline():
    return predict_timeline(timeline_model.Net(), **OPTIONS)


def _source(payload, stack):
    if stack is None:
        return None
    found = payload.stacks[stack]
    return None if found.source is None else found.frames[found.source]


def test_every_activation_band_names_the_line_of_the_helper_that_allocated_it(timeline):
    payload, lines = timeline.payload, timeline_model.lines()
    activations = [b for b in payload.bands if b.category == "activation"]
    sources = [_source(payload, b.stack) for b in activations]
    assert activations and all(s is not None for s in sources)
    assert {(s.file, s.name) for s in sources} == {(HELPER, "forward"), (HELPER, "loss")}
    # the outputs kept for backward: both ReLUs, the head, the loss; never the Linear outputs ReLU replaced
    assert {s.line for s in sources} == {lines["relu1"], lines["relu2"], lines["head"], lines["loss"]}
    # both steps: each kept output appears once per step
    assert sum(1 for s in sources if s.line == lines["relu1"]) == 2
    # the Linear outputs die inside the forward: temporaries (`other`), allocated by their own lines
    others = {
        _source(payload, b.stack).line for b in payload.bands if b.category == "other" and _source(payload, b.stack)
    }
    assert {lines["fc1"], lines["fc2"]} <= others


def test_parameters_gradients_and_optimizer_state_are_there(timeline):
    by_category = {}
    for band in timeline.payload.bands:
        by_category[band.category] = by_category.get(band.category, 0) + 1
    n_params = len(list(timeline_model.Net().parameters()))
    assert by_category["parameter"] == n_params
    assert by_category["gradient"] == 2 * n_params  # created in each step, freed by zero_grad(set_to_none)
    assert by_category["optimizer_state"] == 2 * n_params  # AdamW: exp_avg, exp_avg_sq
    assert by_category["input"] == 2


def test_the_peak_is_the_analysis_peak_allocated_of_the_same_step(timeline):
    report, payload = timeline.report, timeline.payload
    assert payload.peak.bytes == report.peak_allocated_bytes
    # and the same analysis without a timeline reports the same peak: the hook changes nothing it counts
    plain = analyze(timeline_model.Net(), **OPTIONS)
    assert plain.peak_allocated_bytes == payload.peak.bytes
    assert plain.peak_reserved_bytes == max(b for _, b in timeline.history.reserved)
    assert payload.peak.reserved is not None and payload.peak.reserved <= report.peak_reserved_bytes


def test_alive_at_the_peak_sums_to_the_peak_and_names_lines(timeline):
    payload = timeline.payload
    assert sum(h.size for h in payload.alive_at_peak) == payload.peak.bytes
    sizes = [h.size for h in payload.alive_at_peak]
    assert sizes == sorted(sizes, reverse=True)
    text = summary_text(payload)
    assert text.splitlines()[0].startswith("Memory timeline (predicted): Net, batch 64, AdamW, fp32")
    assert "timeline_model.py" in text or "cuBLAS" in text


def test_the_payload_fits_its_schema_and_the_bundle_has_text(timeline):
    bundle = timeline_bundle(timeline.payload)
    jsonschema.Draft202012Validator(SCHEMA).validate(bundle[TIMELINE_MIME])
    assert bundle[TIMELINE_MIME]["source"] == "predicted" and bundle[TIMELINE_MIME]["min_band_bytes"] == 0
    assert "peak" in bundle["text/plain"] and bundle["text/html"].startswith("<pre>")


def test_ordinary_analyze_records_no_frames():
    kept = []
    analyze(timeline_model.Net(), on_trace=kept.append, **OPTIONS)
    assert kept[0].timeline is None  # no hook: no stacks and no device log are kept


def test_predict_keeps_the_history_events_in_order():
    report, history = predict(timeline_model.Net(), **OPTIONS)
    assert history.source == "predicted" and history.baseline == 0
    starts = [a.start for a in history.allocs]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert history.events_total == history.end  # one event index per malloc or free
    assert all(a.requested is not None and a.size >= a.requested for a in history.allocs)


@pytest.mark.parametrize(
    "options, expected",
    [
        (dict(timeline=False, save="x.pickle"), "--save writes the timeline's history: add --timeline"),
        (dict(timeline=True, save=None, json=True), "with JSON output, --timeline needs --save"),
        (dict(timeline=True, save=None, world_size=2), "--timeline is one device's whole step"),
        (dict(timeline=True, save=None, strategy="zero3"), "--timeline is one device's whole step"),
        (dict(timeline=True, save="step.txt"), "--save 'step.txt': a .pickle"),
        (dict(timeline=True, save="/no/such/folder/step.csv"), "the folder '/no/such/folder' does not exist"),
    ],
)
def test_bad_timeline_options_are_one_line(options, expected):
    problem = option_problem(**options)
    assert problem is not None and expected in problem and "\n" not in problem


def test_good_timeline_options_pass(tmp_path):
    assert option_problem(timeline=True, save=None) is None
    assert option_problem(timeline=True, save=str(tmp_path / "a.pickle"), json=True) is None
    assert option_problem(timeline=False, save=None, world_size=4) is None
