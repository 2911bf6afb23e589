"""LoRA: a PEFT model in the kernel traced as it is, adapters added to a planning copy (peft's or our own: the same
memory), analyze(lora=, quantize=) leaving the user's model untouched, and one-line errors for bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
nn = torch.nn

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.model.fine_tune import planned_model  # noqa: E402
from gpumem_kernel.analysis.model.lora import LoraSpec, parse_lora, resolve_targets  # noqa: E402
from gpumem_kernel.analysis.model.quantize import parse_quantize  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"
FIGURES = ("peak_live", "parameters", "buffers", "gradients", "optimizer_state", "activations")


def _llama() -> Any:
    """The shipped tiny Llama config (hidden 64, 4 heads, 2 KV heads, 2 layers), in fp32."""
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(
        transformers.LlamaConfig.from_json_file(str(CONFIGS / "llama" / "config.json"))
    )


def _tokens(batch: int, fake: bool) -> Dict[str, Any]:
    ids = torch.randint(0, 128, (batch, 32))
    return {"input_ids": ids, "labels": ids.clone()}


def _trace(model: Any, fake: bool) -> TraceResult:
    return run_trace(TracePlan(model, "adamw", _tokens, default_loss), 4, fake=fake)


def _bytes(params: Any) -> int:
    return sum(p.numel() * p.element_size() for p in params)


@pytest.mark.parametrize("modules_to_save", [None, ["lm_head"]])
def test_a_peft_model_is_traced_as_it_is(modules_to_save: Any) -> None:
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"], modules_to_save=modules_to_save)
    model = peft.get_peft_model(_llama(), config)
    fake, real = _trace(model, True), _trace(model, False)
    for name in FIGURES:
        assert getattr(fake, name) == getattr(real, name), name
    trainable = _bytes(p for p in model.parameters() if p.requires_grad)
    adapters = _bytes(p for n, p in model.named_parameters() if "lora_" in n)
    assert adapters == 2 * 4 * 8 * (64 + 64) + 2 * 4 * 8 * (64 + 32)  # A [8, 64] and B [out, 8] on q and v, fp32
    # gradients and AdamW's two moments: only the trainable parameters (the adapters, and lm_head's trained copy)
    assert fake.gradients == trainable and fake.optimizer_state == 2 * trainable
    assert (trainable == adapters) == (modules_to_save is None)


@pytest.mark.parametrize("quantize", [None, "nf4"])
def test_our_adapters_take_the_memory_peft_adapters_take(quantize: Any) -> None:
    pytest.importorskip("peft")
    model, spec = _llama(), parse_lora("r=8,targets=q_proj,v_proj,dropout=0.05")
    ours = planned_model(model, spec, parse_quantize(quantize), use_peft=False)
    theirs = planned_model(model, spec, parse_quantize(quantize), use_peft=True)
    assert ours.lora.with_peft is None and theirs.lora.with_peft
    traced_ours, traced_theirs = _trace(ours.model, True), _trace(theirs.model, True)
    for name in FIGURES:
        assert getattr(traced_ours, name) == getattr(traced_theirs, name), name
    real = _trace(planned_model(model, spec, parse_quantize(quantize), on_meta=False, use_peft=False).model, False)
    for name in FIGURES:
        assert getattr(traced_ours, name) == getattr(real, name), name


@pytest.mark.parametrize("quantize", [None, "nf4"])
def test_bf16_adapters_are_held_and_trained_in_bf16(quantize: Any) -> None:
    """dtype=bf16 (LitGPT's and torchtune's adapters): peft's adapters and ours are bf16, take the same memory, and
    half the adapter bytes of fp32 ones: parameters, gradients and AdamW's two moments (which follow the parameter's
    dtype)."""
    pytest.importorskip("peft")
    model, quant = _llama(), parse_quantize(quantize)
    spec, fp32 = parse_lora("r=8,targets=q_proj,v_proj,dtype=bf16"), parse_lora("r=8,targets=q_proj,v_proj")
    ours = planned_model(model, spec, quant, use_peft=False)
    theirs = planned_model(model, spec, quant, use_peft=True)
    for plan in (ours, theirs):
        assert {p.dtype for p in plan.model.parameters() if p.requires_grad} == {torch.bfloat16}
    traced_ours, traced_theirs = _trace(ours.model, True), _trace(theirs.model, True)
    for name in FIGURES:
        assert getattr(traced_ours, name) == getattr(traced_theirs, name), name
    real = _trace(planned_model(model, spec, quant, on_meta=False, use_peft=False).model, False)
    for name in FIGURES:
        assert getattr(traced_ours, name) == getattr(real, name), name
    wide = _trace(planned_model(model, fp32, quant, use_peft=False).model, True)
    adapters = 2 * 8 * ((64 + 64) + (64 + 32))  # A and B on q_proj and v_proj, 2 layers
    assert wide.parameters - traced_ours.parameters == adapters * 2
    assert wide.gradients - traced_ours.gradients == adapters * 2
    assert wide.optimizer_state - traced_ours.optimizer_state == 2 * adapters * 2
    assert "dtype=bf16" in ours.notes[-1] and "dtype=" not in planned_model(model, fp32, None).notes[-1]


def test_bf16_adapters_on_a_bf16_model_are_what_peft_makes_without_autocast() -> None:
    """On a bf16 model, dtype=bf16 is peft's get_peft_model(..., autocast_adapter_dtype=False): the planned copy's
    traced step equals that PEFT model stepped for real."""
    peft = pytest.importorskip("peft")
    plan = planned_model(_llama().to(torch.bfloat16), parse_lora("r=8,targets=q_proj,v_proj,dtype=bf16"), None)
    config = peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"])
    real_model = peft.get_peft_model(_llama().to(torch.bfloat16), config, autocast_adapter_dtype=False)
    fake, real = _trace(plan.model, True), _trace(real_model, False)
    for name in FIGURES:
        assert getattr(fake, name) == getattr(real, name), name
    assert {p.dtype for p in real_model.parameters() if p.requires_grad} == {torch.bfloat16}


def test_dropout_keeps_its_mask_and_copy() -> None:
    model = _llama()
    plain = _trace(planned_model(model, parse_lora("r=8"), None, use_peft=False).model, True)
    dropped = _trace(planned_model(model, parse_lora("r=8,dropout=0.1"), None, use_peft=False).model, True)
    # per adapted layer at most one bool mask and one fp32 output of the [4, 32, 64] input, kept for backward (fewer
    # where autograd needs no mask: layer 0's input needs no gradient, the frozen base saves nothing)
    assert 0 < dropped.activations - plain.activations <= 2 * 4 * (4 * 32 * 64) * (1 + 4)


def test_analyze_plans_on_a_copy_and_reports_the_fine_tune() -> None:
    model = _llama()
    before = [(n, p.requires_grad, p.data_ptr()) for n, p in model.named_parameters()]
    report = analyze(model, batch_size=2, input=32, lora="r=8", quantize="nf4")  # no device: no search
    assert [(n, p.requires_grad, p.data_ptr()) for n, p in model.named_parameters()] == before
    names = {f.name: f for f in report.figures}
    assert {"quantised_weights", "adapters", "dequant_transient"} <= set(names)
    # default targets: q, k, v and o projections, 2 layers; adapters fp32: params + grads + AdamW's two moments
    adapters = 2 * 8 * ((64 + 64) + (64 + 32) + (64 + 32) + (64 + 64))
    assert report.trainable_parameter_count == adapters
    assert names["adapters"].bytes == adapters * 4 * 4
    text = str(report)
    assert "Adapters:" in text and "(LoRA: " in text and "Quantised" in text and "Dequantisation" in text
    assert any("r=8, targets=q_proj,k_proj,v_proj,o_proj" in note for note in report.notes)


@pytest.mark.parametrize("quantize", ["nf4", "fp4", "int8"])
def test_a_quantised_model_counts_the_parameters_the_model_has(quantize: str) -> None:
    """Packed 4-bit storage holds two parameters a byte: the count is the unquantised model's (plus the adapters),
    the packed storage its own figure in bytes."""
    model = _llama()
    plain = analyze(model, batch_size=2, input=32, lora="r=8")
    quantised = analyze(model, batch_size=2, input=32, lora="r=8", quantize=quantize)
    assert quantised.parameter_count == plain.parameter_count
    assert quantised.trainable_parameter_count == plain.trainable_parameter_count
    assert quantised.parameters_bytes < plain.parameters_bytes  # the storage, smaller: not a parameter count
    assert f"({plain.parameter_count:,} parameters)" in str(quantised)


def test_default_targets_are_the_familys_attention_projections() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value, self.dense = (nn.Linear(8, 8) for _ in range(4))

    assert resolve_targets(Block(), LoraSpec(4))[0] == ("query", "key", "value")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"lora": "r=abc"}, "lora: r must be a positive integer, got 'abc'"),
        ({"lora": "r=0"}, "lora: r must be a positive integer"),
        ({"lora": "r=8,targets=nothing_here"}, "lora: targets nothing_here match no Linear layer of LlamaForCausalLM"),
        ({"lora": "r=8,rank=4"}, "lora: unknown setting 'rank'"),
        ({"lora": "r=8,dropout=1.5"}, "lora: dropout must be in [0, 1)"),
        ({"lora": "r=8,dtype=int4"}, "lora: dtype must be one of fp32, bf16, fp16, got 'int4'"),
        ({"lora": "alpha=16"}, "lora: give the rank"),
        ({"quantize": "nf5"}, "unknown quantize 'nf5'; use one of nf4, fp4, int8"),
    ],
)
def test_bad_values_are_one_line(options: Dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        analyze(_llama(), batch_size=2, input=32, **options)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_an_optimizer_object_cannot_step_the_planned_copy() -> None:
    model = _llama()
    with pytest.raises(ValueError, match="name the optimizer kind"):
        analyze(model, batch_size=2, input=32, lora="r=8", optimizer=torch.optim.AdamW(model.parameters()))


def test_the_cli_says_a_bad_lora_in_one_line(capsys: Any) -> None:
    from gpumem_kernel import cli

    code = cli.main(["analyze", "--model", str(CONFIGS / "llama"), "-b", "2", "--input", "16", "--lora", "r=abc"])
    err = capsys.readouterr().err
    assert code == 2 and "lora: r must be a positive integer, got 'abc'" in err and err.count("\n") <= 1


def test_amp_saving_is_not_claimed_over_a_bf16_base_whose_adapters_alone_are_fp32() -> None:
    """Without autocast a LoRA step over a bf16 base runs its base in bf16: "vs fp32" would not be what AMP saves,
    so the step without AMP is not traced and the report says why. Over an fp32 base it is traced."""
    from gpumem_kernel.analysis.search import engines

    counted = []

    def traced(model: Any, **options: Any) -> Any:
        counted.clear()
        run = engines.run_trace
        engines.run_trace = lambda plan, batch, **kw: counted.append(batch) or run(plan, batch, **kw)
        try:
            return analyze(model, batch_size=2, input=32, lora="r=8", amp="bf16", **options), list(counted)
        finally:
            engines.run_trace = run

    half, half_traces = traced(_llama().to(torch.bfloat16))
    assert half.amp_saved_bytes is None and half_traces == [2, 4]  # the step, and twice its batch for the slope
    assert any("frozen weights are bfloat16 already" in note and "mostly in bfloat16" in note for note in half.notes)
    full, full_traces = traced(_llama())
    assert full.amp_saved_bytes is not None and full_traces == [2, 4, 2]  # and the step without AMP
    assert not any("AMP's saving is not traced" in note for note in full.notes)
