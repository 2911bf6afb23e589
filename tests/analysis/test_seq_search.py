"""The sequence length (analysis.request.sequence, analysis.search.max_sequence): seq= sets the tokens per sample of a
token input and says in one line when the input is not token ids; search="seq" finds the longest sequence that fits at
fixed batches with search.py's bracket, in multiples of 64 tokens, and picks below it by the batch picks' rule."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpumem_kernel.analysis.search import max_sequence as seq_search  # noqa: E402
from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.pipeline.model_source import analyze_named  # noqa: E402
from gpumem_kernel.analysis.report.picks import Rounding, picks_below  # noqa: E402
from gpumem_kernel.analysis.request.sequence import at_sequence  # noqa: E402
from gpumem_kernel.magics.options import analyze_arguments  # noqa: E402
from gpumem_kernel.magics.parsing import parse  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def large_vocabulary(tmp_path: Path) -> str:
    config = json.loads((CONFIGS / "llama" / "config.json").read_text())
    config["vocab_size"] = 32_000  # the logits dominate: memory grows steeply with the sequence
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_the_longest_sequence_at_each_batch_is_a_multiple_of_64_that_fits_with_the_next_over(tmp_path):
    report = analyze_named(large_vocabulary(tmp_path), batch_size=1, memory="2GiB", search="seq", seq_batches="1,4")
    found = report.sequence_search
    limit = report.device.limit_bytes

    assert (found.multiple, found.multiple_source, found.context, found.engine) == (64, "default", 256, "traced")
    assert [r.batch for r in found.results] == [1, 4]
    for result in found.results:
        peaks = {p.seq: p.peak_bytes for p in result.curve}
        assert result.maximum > 0 and result.maximum % 64 == 0
        assert peaks[result.maximum] <= limit < peaks[result.maximum + 64]  # exact: the bracket closed to 64 tokens
        assert (result.recommended, result.safe) == picks_below(result.maximum, Rounding(multiple=64))
        assert result.recommended % 64 == 0 and result.safe < result.recommended < result.maximum
        assert "over the model's context of 256 positions" in result.note
    assert found.results[0].maximum > found.results[1].maximum

    text = str(report)
    assert "📏 Longest Sequence (traced, in multiples of 64 tokens (default)):" in text
    first = found.results[0]
    assert f"Batch 1:          longest {first.maximum:,}; recommended {first.recommended:,}; safe" in text
    payload = report.to_payload()
    assert payload["settings"]["search"] == "seq" and payload["sequence_search"]["results"][1]["batch"] == 4


def test_a_predicted_length_the_answer_names_twice_is_traced_once():
    """The answer's lengths repeat where the last length that fits is also the one that needs most: each predicted
    length is confirmed by one trace (a second of an 8B step), not one per mention."""
    from gpumem_kernel.analysis.search.engines import Point

    class Lengths(seq_search._SequenceEngine):
        def __init__(self) -> None:  # no plan: point() below stands in for the traced step
            self.cache = {k: Point(k, 10 * k, 12 * k, 12 * k, "traced") for k in (3, 4)}
            self.predicted, self.segments, self.fit, self.agreed, self.traced = {3, 4}, {}, None, True, []

        def point(self, k, traced=False):
            if k not in self.cache:
                self.traced.append(k)
                self.cache[k] = Point(k, 10 * k, 12 * k, 12 * k, "traced")
                self.agreed = True  # the trace gave the stream predicted
            return self.cache[k]

    engine = Lengths()
    assert engine.confirm([3, 4, 3, 3]) and engine.traced == [3, 4] and not engine.predicted


def search_traced(monkeypatch, config: str, options: dict):
    """The sequence search's answers and curves of analyze_named(config, **options), and the batches it traced."""
    from gpumem_kernel.analysis.search import engines

    traced = []
    trace = engines.run_trace
    monkeypatch.setattr(engines, "run_trace", lambda plan, b, **kw: traced.append(b) or trace(plan, b, **kw))
    report = analyze_named(config, **options)
    monkeypatch.setattr(engines, "run_trace", trace)
    results = [(r.batch, r.maximum, r.recommended, r.safe, r.note, r.curve) for r in report.sequence_search.results]
    return results, traced


def test_the_analysed_length_is_a_point_of_the_search_without_a_trace_of_its_own(tmp_path, monkeypatch):
    """At a batch the analysis traced, its trace at the analysed length is a sample of the search's fit, not traced
    again: the same answers and curve as a search that traces it, and no more traces."""
    from gpumem_kernel.analysis.search import engines

    config = large_vocabulary(tmp_path)
    options = dict(batch_size=1, seq=256, memory="2GiB", search="seq", seq_batches="1,4")
    kept = engines.TraceMemo.get
    reused = []

    def get(memo, batch):
        trace = kept(memo, batch)
        if trace is not None:
            reused.append(batch)
        return trace

    monkeypatch.setattr(engines.TraceMemo, "get", get)
    shared, shared_traces = search_traced(monkeypatch, config, options)
    assert 1 in reused and 256 in [p.seq for p in shared[0][-1]]  # batch 1, which the analysis traced
    monkeypatch.setattr(engines.TraceMemo, "get", lambda memo, batch: None)
    alone, alone_traces = search_traced(monkeypatch, config, options)
    assert shared == alone and len(shared_traces) <= len(alone_traces)


def test_a_batchs_fit_over_the_length_moves_to_the_next_batch_the_analysis_traced(tmp_path, monkeypatch):
    """Batches 4 and 8, both traced by the analysis at its length: batch 8 starts from batch 4's fit, each storage's
    bytes the same or twice as the two traces show, and traces only its answer; the same answers and curve as
    batch 8 fitting its own lengths, with fewer traces."""
    from gpumem_kernel.analysis.search.size_reuse import SizeFit

    config = large_vocabulary(tmp_path)
    options = dict(batch_size=4, seq=256, memory="3GiB", search="seq", seq_batches="4,8")
    at_batch = SizeFit.at_batch
    moved = []

    def watched(fit, here, there, size, ratio):
        result = at_batch(fit, here, there, size, ratio)
        moved.append((ratio, result is not None))
        return result

    monkeypatch.setattr(SizeFit, "at_batch", watched)
    shared, shared_traces = search_traced(monkeypatch, config, options)
    assert moved == [((8, 4), True)] and shared[1][1] > 0
    monkeypatch.setattr(SizeFit, "at_batch", lambda fit, here, there, size, ratio: None)
    alone, alone_traces = search_traced(monkeypatch, config, options)
    assert shared == alone and shared_traces.count(8) < alone_traces.count(8)


def test_seq_sets_the_token_count_of_a_model_by_name_and_of_a_token_shape(tmp_path):
    report = analyze_named(large_vocabulary(tmp_path), batch_size=2, seq=96, memory="2GiB")
    assert report.settings["seq"] == 96 and report.settings["input"] == "input_ids (96 tokens, vocab 32000) + labels"
    assert report.llm.logits.seq == 96 and report.sequence_search is None

    lm = torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Linear(16, 100))
    assert at_sequence(lm, None, 128) == (128,) == at_sequence(lm, "128", 128)
    with pytest.raises(ValueError, match=r"^input of 512 tokens and seq 128 disagree: give one of them$"):
        at_sequence(lm, 512, 128)


def test_a_sample_batch_of_token_ids_is_cycled_to_the_sequence_length():
    lm = torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Linear(16, 100))
    ids = torch.arange(10).repeat(2, 1)
    sample = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "scale": torch.ones(2, 10)}
    longer = at_sequence(lm, sample, 25)
    assert longer["input_ids"].shape == longer["attention_mask"].shape == (2, 25)
    assert longer["input_ids"][0, 10:20].tolist() == list(range(10))  # real ids, repeated
    assert longer["scale"] is sample["scale"]  # not token ids: as given


def test_an_input_that_is_not_token_ids_is_one_line():
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 8))
    with pytest.raises(ValueError) as raised:
        analyze(mlp, batch_size=2, seq=4096, memory="2GiB")
    assert str(raised.value) == (
        "seq 4096: Sequential's input is not token ids (it starts with a Linear, not an Embedding); a sequence "
        "length applies to inputs of token ids (a token count such as input=512, or a sample batch of token ids)"
    )
    for input, words in (("3x32x32", "the input (3, 32, 32) is one sample's shape"), (lambda b: b, "your function")):
        with pytest.raises(ValueError, match=re.escape(words)):
            at_sequence(mlp, input, 64)
    with pytest.raises(ValueError, match=r"^seq 64: Sequential's input is not token ids"):
        analyze(mlp, batch_size=2, search="seq", memory="2GiB")  # the search asks for token ids too, before a trace
    with pytest.raises(ValueError, match=r"^unknown search 'length'; use one of batch, seq$"):
        analyze(mlp, batch_size=2, search="length")


def test_the_multiple_is_the_options_else_the_jupyterlab_settings_else_64():
    assert seq_search.resolve_multiple(None) == (64, "default")
    assert seq_search.resolve_multiple(None, "128") == (128, "setting")
    assert seq_search.resolve_multiple(32, "128") == (32, "option")
    with pytest.raises(ValueError, match="seq_multiple must be a whole number of tokens"):
        seq_search.resolve_multiple(None, "sixty-four")
    assert seq_search.check_batches(None) == (1, 4, 8) and seq_search.check_batches("8, 1") == (1, 8)


def test_the_magic_takes_the_sequence_options():
    args = parse(analyze_arguments, "analyze", "hf:x/y --seq 4096 --search seq --seq-batches 1,4,8 --seq-multiple 128")
    assert (args.seq, args.search, args.seq_batches, args.seq_multiple) == (4096, "seq", "1,4,8", 128)
    assert parse(analyze_arguments, "analyze", "model").search == "batch"


def test_the_browser_sends_the_multiple_with_configure(make_prober):
    """`configure` with `seq_multiple` (src/channel/bridge.ts sends it after a hello listing "seq_multiple")."""
    from fake_comm import FakeComm, open_msg

    from gpumem_kernel.channel.comm import Channel
    from gpumem_kernel.probe.sampler import Sampler

    channel = Channel(Sampler(make_prober([])), "0.1.0")
    comm = FakeComm("c1")
    channel._on_open(comm, open_msg({"type": "open", "protocol": 1}))
    assert "seq_multiple" in comm.sent[0]["capabilities"]
    try:
        for request, value in ((128, 128), (0, 128), ("64", 128)):  # a bad value is refused and changes nothing
            comm.browser_sends({"type": "request", "id": "r", "action": "configure", "args": {"seq_multiple": request}})
            assert comm.sent[-1]["type"] == ("reply" if request == 128 else "error")
            assert seq_search.resolve_multiple(None, channel.settings.seq_multiple) == (value, "setting")
    finally:
        channel.unregister()


# --- with variable lengths every length up to the picks must fit -------------------------------------------------

MiB = 1 << 20
SCHEMA = Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas" / "analysis.schema.json"


class CurveEngine:
    """The sequence engine's interface over a constructed curve: k x 64 tokens need footprints[k] MiB, with the
    large segments kinds(k); `traced` lists every length it was asked for, once, in order."""

    multiple = 64

    def __init__(self, footprints, kinds) -> None:
        self.footprints, self.kinds, self.traced = footprints, kinds, []

    def point(self, k):
        if k not in self.traced:
            self.traced.append(k)
        mib = self.footprints(k)
        return seq_search.Point(k, mib * MiB // 2, mib * MiB, mib * MiB, "traced")

    def signature(self, k):
        return self.kinds(k)


def search_then_check(engine, limit_mib):
    found = seq_search.search_maximum(engine, limit_mib * MiB)
    searched = list(engine.traced)
    variable = seq_search.check_every_length(engine, found.maximum, limit_mib * MiB, searched)
    return found.maximum, variable, len(engine.traced) - len(searched)


def every_length_by_scan(engine, maximum, limit_mib):
    """The longest length up to which every multiple fits, by asking for each length in turn."""
    k = 0
    while k < maximum and engine.footprints(k + 1) <= limit_mib:
        k += 1
    return k * engine.multiple


def test_a_shorter_length_that_reserves_a_20_mib_buffer_lowers_the_limit_for_variable_lengths():
    # 5 to 7 multiples: a request under 10 MiB takes a 20 MiB buffer; from 8 it gets its own, smaller segment
    def kinds(k):
        return ("buffer",) if k < 5 else ("buffer", "buffer") if k < 8 else ("exact",)

    engine = CurveEngine(lambda k: 500 + 4 * k + (20 if 5 <= k < 8 else 0), kinds)
    assert [engine.footprints(k) for k in (4, 5, 7, 8, 10, 11)] == [516, 540, 548, 532, 540, 544]
    maximum, variable, extra = search_then_check(engine, 539)

    assert maximum == 9 and variable.every_length == every_length_by_scan(engine, maximum, 539) == 4 * 64
    assert variable.complete and variable.extra_traces == extra <= seq_search.CHECK_RUNS
    assert (variable.peak_bytes, variable.allocated_bytes) == (516 * MiB, 258 * MiB)  # the highest up to 256 tokens
    dip = variable.dip
    assert (dip.shorter, dip.longer, dip.shorter_bytes, dip.longer_bytes) == (384, 512, 544 * MiB, 532 * MiB)
    assert seq_search.variable_note(variable, maximum * 64) == (
        "384 tokens need 2.3 % more than 512: with variable lengths the limit is 256"
    )
    assert 256 in variable.checked and 320 in variable.checked  # the first length over, found by the check
    assert 448 not in variable.checked  # between two lengths over: not needed

    budget = CurveEngine(engine.footprints, kinds)
    found = seq_search.search_maximum(budget, 539 * MiB)
    short = seq_search.check_every_length(budget, found.maximum, 539 * MiB, list(budget.traced), runs=2)
    assert (short.complete, short.every_length, short.extra_traces) == (False, 256, 2)  # 64 and 256 verified only
    assert seq_search.variable_note(short, 9 * 64) == (
        "every length was checked up to 256 only (2 extra traces): the picks are below it"
    )


def test_lengths_the_search_predicted_do_not_count_as_the_checks_traces():
    """A predicted length costs an allocator replay, not a trace: with two traces to spend the check still follows
    every segment change (a long text at batch 1 has dozens), up to CHECK_POINTS lengths in all."""

    def kinds(k):
        return ("buffer",) if k < 5 else ("buffer", "buffer") if k < 8 else ("exact",)

    class Predicting(CurveEngine):
        predicted = set(range(1, 100))

    engine = Predicting(lambda k: 500 + 4 * k + (20 if 5 <= k < 8 else 0), kinds)
    found = seq_search.search_maximum(engine, 539 * MiB)
    full = seq_search.check_every_length(engine, found.maximum, 539 * MiB, list(engine.traced), runs=2)
    assert full.complete and full.extra_traces > 2
    assert full.every_length == every_length_by_scan(engine, found.maximum, 539) == 256
    assert seq_search.variable_note(full, found.maximum * 64).endswith("with variable lengths the limit is 256")
    capped = seq_search.check_every_length(
        Predicting(lambda k: 500, lambda k: ("exact",) * k), 200, 539 * MiB, [1, 200]
    )  # a segment more at each length: every gap is bisected, up to the cap
    assert not capped.complete and capped.extra_traces == seq_search.CHECK_POINTS


def test_when_the_shortest_length_is_over_no_length_is_picked():
    engine = CurveEngine(lambda k: 600 if k == 1 else 500 + 4 * k, lambda k: ("buffer",) if k == 1 else ("exact",))
    maximum, variable, _ = search_then_check(engine, 541)
    assert maximum == 10 and variable.every_length == 0 and variable.dip.shorter == 64
    assert seq_search.variable_note(variable, 640).endswith(": with variable lengths not even 64 tokens fit")
    assert picks_below(variable.every_length, Rounding(multiple=64)) == (None, None)


def test_a_dip_under_the_limit_is_said_and_keeps_the_maximum():
    def kinds(k):
        return ("buffer",) if k < 5 else ("buffer", "buffer") if k < 8 else ("exact",)

    engine = CurveEngine(lambda k: 500 + 4 * k + (20 if 5 <= k < 8 else 0), kinds)
    maximum, variable, extra = search_then_check(engine, 560)
    assert variable.every_length == every_length_by_scan(engine, maximum, 560) == maximum * 64
    assert variable.dip is not None and variable.extra_traces == extra
    assert seq_search.variable_note(variable, maximum * 64).endswith(f"every length up to {maximum * 64:,} fits")


def test_a_curve_that_only_grows_has_no_note_and_with_the_same_segments_costs_one_trace():
    engine = CurveEngine(lambda k: 500 + 4 * k, lambda k: ("exact",) * (1 + k // 6))  # more segments, never less
    maximum, variable, extra = search_then_check(engine, 541)
    assert variable.every_length == every_length_by_scan(engine, maximum, 541) == maximum * 64
    assert variable.dip is None and seq_search.variable_note(variable, maximum * 64) == ""
    assert variable.extra_traces == extra
    same = CurveEngine(lambda k: 500 + 4 * k, lambda k: ("exact",))
    assert search_then_check(same, 541)[2] == 1  # the shortest length, nothing between: the kinds agree


class Wide(torch.nn.Module):
    """Token ids -> a 4096-wide activation: at batch 4 a 32 x 4096 fp32 activation is 2 MiB per 32 tokens, so
    lengths around 100 to 170 tokens put it under 10 MiB (a 20 MiB buffer) and longer ones over (its own segment)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 4096)
        self.out = torch.nn.Linear(4096, 64)

    def forward(self, ids):
        return self.out(torch.relu(self.embed(ids)) * 2)


def traced_search(monkeypatch, memory):
    """analyze(search="seq") at batch 4 in multiples of 24 tokens, with the search's engine kept to trace more
    lengths, and the traces the bracket made before the check."""
    kept = {}
    search_maximum = seq_search.search_maximum

    def keep(engine, limit, runs):
        found = search_maximum(engine, limit, runs)
        kept.update(engine=engine, bracket=len(engine.cache))
        return found

    monkeypatch.setattr(seq_search, "search_maximum", keep)
    report = analyze(Wide(), batch_size=4, input=(24,), memory=memory, search="seq", seq_multiple=24, seq_batches=4)
    return report, kept["engine"], len(kept["engine"].cache) - kept["bracket"]


def test_a_traced_model_whose_shorter_lengths_reserve_more_gets_the_limit_every_length_fits(monkeypatch):
    probe, engine, _ = traced_search(monkeypatch, "4GiB")
    at = {k: engine.point(k).footprint for k in range(1, 10)}  # 24 to 216 tokens
    dips = [k for k in range(1, 9) if at[k] > at[8]]
    assert dips, f"the 20 MiB buffer should make a length under 192 tokens need more: {at}"
    # a device where 192 tokens just fit: the shorter lengths that reserve the buffer do not
    memory = f"{(4 << 30) + at[8] - probe.device.limit_bytes}B"
    report, engine, extra = traced_search(monkeypatch, memory)
    result = report.sequence_search.results[0]
    variable, limit = result.variable, report.device.limit_bytes

    fits = {k: engine.point(k) is not None and engine.point(k).footprint <= limit for k in range(1, 10)}
    every = variable.every_length // 24
    assert result.maximum == 192 and 0 < every < 8
    assert all(fits[k] for k in range(1, every + 1)) and not fits[every + 1]  # traced at each length below
    assert (result.recommended, result.safe) == picks_below(variable.every_length, Rounding(multiple=24))
    assert variable.extra_traces == extra and 0 < extra <= seq_search.CHECK_RUNS  # counted by the engine's cache
    dip = variable.dip
    assert dip.longer == 192 and dip.shorter < 192 and dip.shorter_bytes > dip.longer_bytes
    assert (
        f"{dip.shorter} tokens need {100 * (dip.shorter_bytes / dip.longer_bytes - 1):.1f} % more than 192: "
        f"with variable lengths the limit is {variable.every_length}"
    ) in result.note
    assert f"with variable lengths the limit is {variable.every_length}" in str(report)

    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(json.loads(json.dumps(report.to_payload())), json.loads(SCHEMA.read_text()))
