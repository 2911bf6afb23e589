"""The attention path: a trace takes the path real tensors take (a 4-D mask or none, a grouped-query model's K/V
expanded or not) for every input (no mask, an all-ones mask, a padded mask), with and without LoRA, SDPA and eager,
under the installed transformers (4.57 and 5.x each run these); the report names that path; `padded=True` pads the
built-in token batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
F = torch.nn.functional

from gpumem_kernel.analysis.fake.attention_path import AttentionCall, grouped_query, path_phrase  # noqa: E402
from gpumem_kernel.analysis.model.fine_tune import planned_model  # noqa: E402
from gpumem_kernel.analysis.model.lora import parse_lora  # noqa: E402
from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.request.inputs import batch_maker  # noqa: E402
from gpumem_kernel.analysis.trace.llm_facts import llm_facts, output_vocabulary  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
FIGURES = ("peak_live", "parameters", "gradients", "optimizer_state", "activations", "input")
SEQ, BATCH = 32, 4
MASKS = ("none", "ones", "padded")


def _model(family: str, attention: str) -> Any:
    """The shipped tiny configs in fp32: Llama (4 query heads, 2 key/value heads: grouped-query), GPT-2 (plain)."""
    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig.from_json_file(str(CONFIGS / "llama" / "config.json"))
        config._attn_implementation = attention
        return transformers.LlamaForCausalLM(config)
    config = transformers.GPT2Config.from_json_file(str(CONFIGS / "gpt2" / "config.json"))
    config._attn_implementation = attention
    return transformers.GPT2LMHeadModel(config)


def _batches(mask: str) -> Callable[[int, bool], Dict[str, Any]]:
    """A batch function as a user writes one: ids and labels, and the mask made by fills (ones, padding zeroed)."""

    def make(batch: int, fake: bool) -> Dict[str, Any]:
        ids = torch.randint(0, 128, (batch, SEQ))
        out = {"input_ids": ids, "labels": ids.clone()}
        if mask != "none":
            out["attention_mask"] = torch.ones(batch, SEQ, dtype=torch.long)
        if mask == "padded":
            out["attention_mask"][1:, SEQ - 8 :] = 0
            out["labels"][1:, SEQ - 8 :] = -100
        return out

    return make


class _Spy:
    """The calls F.scaled_dot_product_attention gets in a plain forward: what real tensors decide, no trace."""

    def __init__(self) -> None:
        self.calls: List[AttentionCall] = []

    def __call__(self, query: Any, key: Any, value: Any, attn_mask: Any = None, *args: Any, **kwargs: Any) -> Any:
        dims = None if attn_mask is None else attn_mask.dim()
        self.calls.append(AttentionCall(query.shape[1], key.shape[1], dims))
        return self.original(query, key, value, attn_mask, *args, **kwargs)

    original = staticmethod(F.scaled_dot_product_attention)


def _real_path(model: Any, make: Callable[[int, bool], Any], monkeypatch: Any) -> Optional[str]:
    spy = _Spy()
    with monkeypatch.context() as patch:
        patch.setattr(F, "scaled_dot_product_attention", spy)
        model(**make(BATCH, False))
    config = model.config
    return path_phrase(config._attn_implementation, grouped_query(config), spy.calls[0] if spy.calls else None)


def _trace(model: Any, make: Callable[[int, bool], Any], fake: bool) -> TraceResult:
    plan = TracePlan(model, "adamw", make, default_loss, logits_vocab=output_vocabulary(model))
    return run_trace(plan, BATCH, fake=fake)


def _traced_path(model: Any, trace: TraceResult) -> Optional[str]:
    facts = llm_facts(model, trace, BATCH, checkpointing=False)
    return facts.attention_path if facts is not None else None


def _expected(family: str, attention: str, mask: str) -> str:
    """What real tensors take, in every transformers version: no mask (SDPA's is_causal) unless the batch pads; a
    mask expands a grouped-query model's K/V; eager always builds the mask and expands."""
    grouped = family == "llama"
    if attention == "eager":
        return "eager, K/V expanded" if grouped else "eager"
    if mask != "padded":
        return "SDPA, grouped-query, no mask" if grouped else "SDPA, no mask"
    return "SDPA with a 4-D mask, K/V expanded" if grouped else "SDPA with a 4-D mask"


def _assert_same_trace(fake: TraceResult, real: TraceResult) -> None:
    for name in FIGURES:
        assert getattr(fake, name) == getattr(real, name), name


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize(
    "family, attention", [("llama", "sdpa"), ("gpt2", "sdpa"), ("llama", "eager"), ("gpt2", "eager")]
)
def test_the_trace_takes_the_path_real_tensors_take(family: str, attention: str, mask: str, monkeypatch: Any) -> None:
    model, make = _model(family, attention), _batches(mask)
    expected = _expected(family, attention, mask)
    assert _real_path(model, make, monkeypatch) == expected
    fake, real = _trace(model, make, True), _trace(model, make, False)
    _assert_same_trace(fake, real)
    assert _traced_path(model, fake) == _traced_path(model, real) == expected


@pytest.mark.parametrize("mask", MASKS)
def test_a_lora_copy_takes_the_same_path(mask: str, monkeypatch: Any) -> None:
    model = planned_model(_model("llama", "sdpa"), parse_lora("r=8"), None, on_meta=False, use_peft=False).model
    make = _batches(mask)
    expected = _expected("llama", "sdpa", mask)
    assert _real_path(model, make, monkeypatch) == expected
    fake, real = _trace(model, make, True), _trace(model, make, False)
    _assert_same_trace(fake, real)
    assert _traced_path(model, fake) == _traced_path(model, real) == expected


def test_expanded_kv_costs_more_than_grouped_query() -> None:
    """The padded batch's 4-D mask and expanded K/V take more memory than the all-ones batch's path, which takes no
    more than no mask at all (the mask itself: a few bytes per token)."""
    model = _model("llama", "sdpa")
    none, ones, padded = (_trace(model, _batches(mask), True) for mask in MASKS)
    assert ones.activations - none.activations <= BATCH * SEQ * 8
    assert padded.activations > ones.activations


@pytest.mark.parametrize("mask", ["ones", "padded"])
def test_a_sample_batch_is_traced_with_its_own_mask(mask: str, monkeypatch: Any) -> None:
    model = _model("llama", "sdpa")
    sample = _batches(mask)(2, False)  # two rows, cycled to the batch size
    make, _ = batch_maker(model, sample)
    expected = _expected("llama", "sdpa", mask)
    assert _real_path(model, make, monkeypatch) == expected
    fake, real = _trace(model, make, True), _trace(model, make, False)
    _assert_same_trace(fake, real)
    assert _traced_path(model, fake) == expected


def test_a_mask_the_trace_cannot_know_takes_the_larger_path_and_says_so() -> None:
    """A mask computed from values the fake trace has none of (a random draw): traced with the 4-D mask, an upper
    bound, and a note; the real trace reads the all-ones mask and skips it."""

    def make(batch: int, fake: bool) -> Dict[str, Any]:
        ids = torch.randint(0, 128, (batch, SEQ))
        return {"input_ids": ids, "labels": ids.clone(), "attention_mask": (ids >= 0).long()}

    model = _model("llama", "sdpa")
    fake, real = _trace(model, make, True), _trace(model, make, False)
    assert _traced_path(model, fake) == "SDPA with a 4-D mask, K/V expanded"
    assert _traced_path(model, real) == "SDPA, grouped-query, no mask"
    assert fake.peak_live > real.peak_live
    assert any("attention mask" in note and "values are unknown" in note for note in fake.notes)


def test_padded_pads_the_token_batch() -> None:
    model = _model("llama", "sdpa")
    make, described = batch_maker(model, (SEQ,), pad=True)
    batch = make(3, False)
    mask, labels, ids = batch["attention_mask"], batch["labels"], batch["input_ids"]
    assert mask.shape == ids.shape == labels.shape == (3, SEQ) and mask.dtype == torch.long
    assert bool(mask[0].all())  # the longest sample, whole
    assert mask[1:, : SEQ - 8].all() and not mask[1:, SEQ - 8 :].any()  # the others end in padding
    assert bool((labels[mask == 0] == -100).all()) and bool((labels[mask == 1] == ids[mask == 1]).all())
    assert "padded: attention_mask + labels" in described


def test_analyze_padded_names_the_path_in_the_report() -> None:
    model = _model("llama", "sdpa")
    plain, padded = analyze(model, batch_size=2, input=SEQ), analyze(model, batch_size=2, input=SEQ, padded=True)
    assert plain.to_payload()["llm"]["attention_path"] == "SDPA, grouped-query, no mask"
    payload = json.loads(json.dumps(padded.to_payload()))
    assert payload["llm"]["attention_path"] == "SDPA with a 4-D mask, K/V expanded"
    assert "Attention path:   SDPA with a 4-D mask, K/V expanded (as traced)" in str(padded)


@pytest.mark.parametrize(
    "model, options, message",
    [
        ("llama", {"input": (3, 4)}, "padded: a padded batch is a token batch"),
        ("embedding", {"input": SEQ}, "padded: Sequential.forward takes no input_ids and attention_mask"),
        ("llama", {"input": {"input_ids": torch.zeros(1, 4, dtype=torch.long)}}, "padded: applies to the built-in"),
    ],
)
def test_padded_says_in_one_line_what_it_cannot_pad(model: str, options: Dict[str, Any], message: str) -> None:
    module = _model("llama", "sdpa") if model == "llama" else torch.nn.Sequential(torch.nn.Embedding(10, 4))
    with pytest.raises(ValueError) as info:
        analyze(module, batch_size=2, padded=True, **options)
    assert message in str(info.value) and "\n" not in str(info.value)
