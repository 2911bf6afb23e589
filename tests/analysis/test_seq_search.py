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
