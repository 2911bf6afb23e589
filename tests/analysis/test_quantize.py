"""bitsandbytes' quantised layers as a plan traces them (analysis/model/quantize.py): the resident layouts against
bitsandbytes 0.50.2's own Linear4bit and Linear8bitLt quantised on the CPU, the dequantisation transients in the
trace, fake trace against a real CPU one, and one-line errors for bad values."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.model.fine_tune import planned_model  # noqa: E402
from gpumem_kernel.analysis.model.lora import parse_lora  # noqa: E402
from gpumem_kernel.analysis.model.quantize import (  # noqa: E402
    QuantSpec,
    dequant_bytes,
    layout,
    packed_numel,
    parse_quantize,
    resident_bytes,
    with_bnb_version,
)
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

SHAPES = [(512, 256), (300, 130)]  # (out, in); the second's blocks and nested blocks end part-full


def _bnb() -> Any:
    bnb = pytest.importorskip("bitsandbytes")
    assert bnb.__version__ == "0.50.2"  # the release the layouts were read from (quantize.py's docstring)
    return bnb


def _pieces(tensors: Any) -> list:
    return sorted((tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in tensors)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["nf4", "fp4"])
@pytest.mark.parametrize("double", [True, False])
def test_4bit_layout_is_bitsandbytes_own(kind: str, double: bool, shape: Any) -> None:
    bnb = _bnb()
    out_f, in_f = shape
    layer = bnb.nn.Linear4bit(
        in_f, out_f, bias=False, compute_dtype=torch.bfloat16, compress_statistics=double, quant_type=kind
    ).to("cpu")  # quantises on bitsandbytes' CPU backend
    state = layer.weight.quant_state
    tensors = [layer.weight.data, state.absmax, state.code]
    if double:
        tensors += [state.state2.absmax, state.state2.code, state.offset]
    spec = QuantSpec(kind, double_quant=double)
    assert _pieces(tensors) == _pieces(_as_tensors(spec, out_f, in_f))
    assert resident_bytes(spec, out_f, in_f) == sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_packed_4bit_weight_counts_the_parameters_of_its_original_shape(shape: Any) -> None:
    """bitsandbytes' own Linear4bit (a user's QLoRA model) and our stand-in: the [out, in] elements, not the
    packed bytes' count; a float weight is not packed."""
    bnb = _bnb()
    out_f, in_f = shape
    layer = bnb.nn.Linear4bit(in_f, out_f, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4").to("cpu")
    assert layer.weight.numel() < out_f * in_f  # packed: two per byte
    assert packed_numel(layer, layer.weight) == out_f * in_f
    plain = nn.Linear(in_f, out_f)
    assert packed_numel(plain, plain.weight) is None


@pytest.mark.parametrize("shape", SHAPES)
def test_int8_layout_is_bitsandbytes_own(shape: Any) -> None:
    bnb = _bnb()
    out_f, in_f = shape
    layer = bnb.nn.Linear8bitLt(in_f, out_f, bias=False, has_fp16_weights=False, threshold=6.0).to("cpu")
    tensors = [layer.weight.data, layer.weight.SCB]
    spec = QuantSpec("int8")
    assert _pieces(tensors) == _pieces(_as_tensors(spec, out_f, in_f))
    assert resident_bytes(spec, out_f, in_f) == sum(t.numel() * t.element_size() for t in tensors)


def _as_tensors(spec: QuantSpec, out_f: int, in_f: int) -> list:
    return [torch.empty(p.shape, dtype=getattr(torch, p.dtype), device="meta") for p in layout(spec, out_f, in_f)]


def test_documented_sizes_of_a_llama_projection() -> None:
    # 4096 x 4096 in nf4 with double quantisation: 8 MiB packed, 256 Ki absmax bytes, 1 Ki nested fp32 + code
    spec = QuantSpec("nf4")
    assert resident_bytes(spec, 4096, 4096) == 8 * 2**20 + 2**18 + 1024 * 4 + 256 * 4 + 4 + 16 * 4
    # forward: bf16 dequantised weight + the fp32 absmax; backward from a bf16 weight: the same
    assert dequant_bytes(spec, 4096, 4096, "bfloat16") == (32 * 2**20 + 2**20, 32 * 2**20 + 2**20)
    # from an fp32 weight, backward dequantises into fp32 and casts to bf16
    assert dequant_bytes(spec, 4096, 4096, "float32")[1] == 64 * 2**20 + 32 * 2**20 + 2**20


class Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(64, 1024)
        self.down = nn.Linear(1024, 64)

    def forward(self, x: Any) -> Any:
        return self.down(torch.relu(self.up(x)))


def _traces(kind: str) -> Any:
    torch.manual_seed(0)
    model = Wide()
    results = []
    for fake in (True, False):
        planned = planned_model(model, parse_lora("r=4,targets=up,down"), parse_quantize(kind), on_meta=fake)
        plan = TracePlan(planned.model, "adamw", lambda b, fake: torch.randn(b, 64), default_loss)
        results.append(run_trace(plan, 4, fake=fake))
    return planned, results


@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_traced_quantised_step_agrees_with_a_real_cpu_step(kind: str) -> None:
    planned, (fake, real) = _traces(kind)
    for name in ("peak_live", "parameters", "buffers", "gradients", "optimizer_state", "activations"):
        assert getattr(fake, name) == getattr(real, name), name
    done = planned.quantised
    assert done.layers == 2 and fake.parameters + fake.buffers >= done.resident
    # a batch of 4 is tiny next to the 64 x 1024 weights: the peak over model states is the dequantised weight
    states = fake.parameters + fake.buffers + fake.gradients + fake.optimizer_state
    assert fake.peak_live - states >= max(done.forward_transient, done.backward_transient)


@pytest.mark.parametrize(
    "value, message",
    [
        ("nf5", "unknown quantize 'nf5'; use one of nf4, fp4, int8"),
        ("nf4,compute=fp8", "compute must be one of bf16, fp16, fp32"),
        ("nf4,double=maybe", "double must be on or off"),
        ("int8,threshold=-1", "threshold must be a number >= 0"),
        ("nf4,blocks=32", "unknown setting 'blocks=32'"),
    ],
)
def test_bad_values_are_one_line(value: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_quantize(value)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_settings_are_read() -> None:
    assert parse_quantize("NF4,double=off,compute=fp16") == QuantSpec("nf4", double_quant=False, compute="fp16")
    assert parse_quantize("int8,threshold=4") == QuantSpec("int8", threshold=4.0)
    assert parse_quantize(None) is None


class Head(nn.Module):
    """`big`'s input is the batch (no gradient): only its forward dequantises; the adapter on `small` trains."""

    def __init__(self) -> None:
        super().__init__()
        self.big = nn.Linear(64, 4096)
        self.small = nn.Linear(4096, 8)

    def forward(self, x: Any) -> Any:
        return self.small(self.big(x))


def _head_traces(spec: Any) -> Any:
    """The fp16 Head quantised as `spec` says (compute bf16), traced fake and run for real on the CPU."""
    results = []
    for fake in (True, False):
        planned = planned_model(Head().to(torch.float16), parse_lora("r=4,targets=small"), spec, on_meta=fake)
        batch = lambda b, fake: torch.randn(b, 64, dtype=torch.float16)  # noqa: E731
        results.append(run_trace(TracePlan(planned.model, "adamw", batch, default_loss), 4, fake=fake))
    return results


def test_a_4bit_layer_quantised_from_fp16_with_bf16_compute_traces_as_it_runs() -> None:
    """bitsandbytes 0.50 dequantises straight into the compute dtype in forward; before 0.50.0 into the fp16 the
    weight was quantised from, then cast: both copies of the largest layer alive at once, the fake trace as the real."""
    today_fake, today_real = _head_traces(parse_quantize("nf4"))
    old_fake, old_real = _head_traces(with_bnb_version(parse_quantize("nf4"), "0.49")[0])
    for fake, real in ((today_fake, today_real), (old_fake, old_real)):
        assert fake.peak_live == real.peak_live and fake.phase_peaks == real.phase_peaks
    weight_fp16 = 4096 * 64 * 2
    # the peak is big's forward in both: the extra fp16 copy, less the absmax and the few small tensors freed before it
    assert weight_fp16 * 0.9 < old_fake.peak_live - today_fake.peak_live <= weight_fp16
    spec = with_bnb_version(parse_quantize("nf4"), "0.49")[0]
    forward_old, _ = dequant_bytes(spec, 4096, 64, "float16")
    forward_today, _ = dequant_bytes(parse_quantize("nf4"), 4096, 64, "float16")
    assert forward_old - forward_today == weight_fp16


class FalconLike(nn.Module):
    """Layers as transformers builds them: an nn.Linear subclass (Falcon's FalconLinear), a Conv1D (GPT-2's), an
    output layer it keeps, and a module the model keeps in fp32."""

    _keep_in_fp32_modules = ["wo"]

    def __init__(self) -> None:
        super().__init__()
        self.dense = Subclass(64, 64)
        self.c_attn = Conv1D(192, 64)
        self.wo = nn.Linear(192, 64)
        self.lm_head = nn.Linear(64, 100)

    def get_output_embeddings(self) -> Any:
        return self.lm_head

    def forward(self, x: Any) -> Any:
        return self.lm_head(self.wo(self.c_attn(self.dense(x))))


class Subclass(nn.Linear):
    def forward(self, x: Any) -> Any:
        return x @ self.weight.T + self.bias


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D as it stores its weight: [in, out]."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.zeros(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x: Any) -> Any:
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], self.nf)


def test_linear_subclasses_and_conv1d_are_quantised_and_kept_modules_are_not() -> None:
    from gpumem_kernel.analysis.model.quantize import is_quantised, quantize_linears

    model = FalconLike()
    done = quantize_linears(model, parse_quantize("nf4"), on_meta=False)
    assert is_quantised(model.dense) and is_quantised(model.c_attn)
    assert (model.c_attn.in_features, model.c_attn.out_features) == (64, 192)  # [out, in] as Linear4bit holds it
    assert type(model.wo) is nn.Linear and type(model.lm_head) is nn.Linear
    assert done.layers == 2 and done.skipped == ["lm_head", "wo"]
    assert model(torch.zeros(2, 64)).shape == (2, 100)  # the quantised model still runs


def test_the_transformers_falcon_linear_is_quantised() -> None:
    transformers = pytest.importorskip("transformers")
    from gpumem_kernel.analysis.model.quantize import is_quantised, quantize_linears

    config = transformers.FalconConfig(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=1, vocab_size=128, new_decoder_architecture=True
    )
    with torch.device("meta"):
        model = transformers.FalconForCausalLM(config)
    falcon_linear = [n for n, m in model.named_modules() if type(m).__name__ == "FalconLinear"]
    assert falcon_linear
    quantize_linears(model, parse_quantize("nf4"))
    modules = dict(model.named_modules())
    assert all(is_quantised(modules[name]) for name in falcon_linear)
    assert not is_quantised(model.lm_head)
