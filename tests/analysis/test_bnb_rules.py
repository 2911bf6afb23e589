"""The bitsandbytes version rules (analysis/model/bnb_rules.py) as the quantised plan applies them: before 0.43.2 a
4-bit layer kept its input for backward, and the trace keeps exactly that input per layer; before 0.43.0 its weight
was quantised from fp16, and before 0.50.0 forward dequantised into that dtype and cast; a bad version is one line."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.model.bnb_rules import (  # noqa: E402
    FOUR_BIT_FORWARD_CASTS,
    FOUR_BIT_FROM_FP16,
    FOUR_BIT_KEEPS_INPUT,
    parse,
    rules_for,
)
from gpumem_kernel.analysis.model.fine_tune import planned_model  # noqa: E402
from gpumem_kernel.analysis.model.lora import parse_lora  # noqa: E402
from gpumem_kernel.analysis.model.quantize import QuantSpec, dequant_bytes, parse_quantize, with_bnb_version  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

BATCH, WIDE = 8, 1024


class Scaled(nn.Module):
    """`down`'s input is a product nothing else saves: only the 4-bit layer's own kept input holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(64, WIDE)
        self.down = nn.Linear(WIDE, 64)

    def forward(self, x: Any) -> Any:
        return self.down(self.up(x) * 2.0)


def _trace(bnb_version: Any, spec: Any = None) -> Any:
    spec, notes = with_bnb_version(spec or parse_quantize("nf4"), bnb_version)
    # the adapter on `up` makes `down`'s input need a gradient; `up`'s input (the batch) needs none
    # in bf16, the compute dtype: the dequantised weight needs no cast but the rule's
    planned = planned_model(Scaled().to(torch.bfloat16), parse_lora("r=4,targets=up"), spec)
    plan = TracePlan(planned.model, "adamw", lambda b, fake: torch.randn(b, 64, dtype=torch.bfloat16), default_loss)
    return run_trace(plan, BATCH, fake=True), notes


def test_before_0_43_2_each_4bit_layer_keeps_its_input_and_nothing_more() -> None:
    today, none = _trace(None)
    old, notes = _trace("0.41.1")
    # down's input, cast to the compute dtype (bf16): kept; up's input needs no gradient: not kept
    assert old.activations - today.activations == BATCH * WIDE * 2
    assert old.peak_live > today.peak_live
    assert none == [] and len(notes) == 3 and "4bit-keeps-input" in notes[0] and "pull/1270" in notes[0]
    assert "4bit-quantized-from-fp16" in notes[1] and "pull/970" in notes[1]
    assert "4bit-forward-casts" in notes[2] and "pull/1949" in notes[2]


def test_before_0_43_0_the_weight_is_dequantised_into_fp16_and_cast() -> None:
    today, _ = _trace(None)
    spec = with_bnb_version(parse_quantize("nf4"), "0.42")[0]
    assert spec.quantized_from == "float16" and spec.keeps_input and spec.forward_casts
    # those two rules without the kept input
    old, _ = _trace(None, QuantSpec("nf4", quantized_from="float16", forward_casts=True))
    assert old.activations == today.activations
    # the peak is at a dequantised 64 x 1024 weight, now in fp16 and its bf16 cast at once: one more weight's bytes
    # (less the few small tensors alive at today's peak and not at that one)
    weight = 64 * WIDE * 2
    assert weight * 0.95 < old.peak_live - today.peak_live <= weight
    mib = 2**20
    assert dequant_bytes(spec, 4096, 4096, "bfloat16") == (64 * mib + mib, 64 * mib + mib)


def test_the_rule_names_the_versions_before_the_change() -> None:
    assert rules_for("0.41") == (FOUR_BIT_KEEPS_INPUT, FOUR_BIT_FROM_FP16, FOUR_BIT_FORWARD_CASTS)
    assert rules_for("0.43.0") == rules_for("0.43.1") == (FOUR_BIT_KEEPS_INPUT, FOUR_BIT_FORWARD_CASTS)
    assert rules_for("0.43.2") == rules_for("0.49.1") == (FOUR_BIT_FORWARD_CASTS,)
    assert rules_for("0.50.0") == rules_for("0.50.2") == rules_for(None) == ()
    assert parse("0.41.1+cu121") == (0, 41, 1) and parse("0.44.0.dev0") == (0, 44, 0)
    assert with_bnb_version(parse_quantize("int8"), "0.41")[0] == parse_quantize("int8")  # 4-bit only


@pytest.mark.parametrize("value", ["banana", "0", "v0.41", "0.41.x"])
def test_a_bad_version_is_one_line(value: str) -> None:
    with pytest.raises(ValueError) as info:
        with_bnb_version(parse_quantize("nf4"), value)
    assert f"bnb_version {value!r} not understood" in str(info.value) and "\n" not in str(info.value)


def test_analyze_says_a_bad_version_in_one_line_before_any_trace() -> None:
    from gpumem_kernel.analysis import analyze

    with pytest.raises(ValueError) as info:
        analyze(Scaled(), batch_size=2, input=(64,), quantize="nf4", optimizer="adamw", bnb_version="0.4x")
    assert str(info.value).startswith("bnb_version '0.4x' not understood") and "\n" not in str(info.value)
