"""Repeated blocks traced once and replayed (analysis.trace.replicate) against the full trace: the same event stream,
records (stacks included), breakdown and peaks, to the byte, on small models of each family."""

import dataclasses
from typing import Any, Callable, Dict, Tuple

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
nn = torch.nn
F = torch.nn.functional

from gpumem_kernel.analysis.model.fine_tune import planned_model  # noqa: E402
from gpumem_kernel.analysis.model.lora import parse_lora  # noqa: E402
from gpumem_kernel.analysis.model.quantize import parse_quantize  # noqa: E402
from gpumem_kernel.analysis.trace.replicate import block_runs  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402
from gpumem_kernel.timeline.predicted import stack_hook  # noqa: E402

VOCAB, TOKENS = 1000, 16
_SMALL = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4)


def _tokens(batch: int, fake: bool) -> Dict[str, Any]:
    ids = torch.randint(0, VOCAB, (batch, TOKENS))
    return {"input_ids": ids, "labels": ids.clone()}


def _hf(config: Any, dtype: Any = torch.bfloat16) -> Any:
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)


def _traces(model: Any, make_batch: Callable[[int, bool], Any], **options: Any) -> Tuple[TraceResult, TraceResult]:
    def trace(replicate: bool) -> TraceResult:
        plan = TracePlan(model, "adamw", make_batch, default_loss, replicate=replicate, stack_hook=stack_hook())
        for key, value in options.items():
            setattr(plan, key, value)
        return run_trace(plan, 2)

    return trace(True), trace(False)


def _same(replicated: TraceResult, full: TraceResult) -> None:
    assert replicated.timeline is not None and full.timeline is not None
    assert replicated.device.events == full.device.events
    records = [dataclasses.astuple(r) for r in replicated.timeline.records]
    assert records == [dataclasses.astuple(r) for r in full.timeline.records]
    assert replicated.timeline.device == full.timeline.device
    for name in ("peak_live", "peak_phase", "step_peaks", "phase_peaks", "breakdown", "activations", "gradients"):
        assert getattr(replicated, name) == getattr(full, name), name
    assert replicated.device.peak_reserved == full.device.peak_reserved


LLMS = {
    "llama": lambda: transformers.LlamaConfig(**_SMALL, num_key_value_heads=2),
    "qwen2": lambda: transformers.Qwen2Config(**_SMALL, num_key_value_heads=2),
    "mistral": lambda: transformers.MistralConfig(**_SMALL, num_key_value_heads=2, sliding_window=8),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(**_SMALL),
    "phi": lambda: transformers.PhiConfig(**_SMALL),
}


@pytest.mark.parametrize("family", list(LLMS))
def test_llm_replicated_equals_full(family: str) -> None:
    """bf16 weights under AMP with checkpointing, as the benchmark's 8B: the third layer of four replayed in the
    first step (the first, the second, which shows what a block keeps of its input, and the last run), all four
    in the second."""
    replicated, full = _traces(_hf(LLMS[family]()), _tokens, amp="bf16", checkpointing=True)
    assert replicated.replication.used and replicated.replication.replayed == 1 + 4
    assert full.replication is not None and not full.replication.used
    assert any("traced once and replicated" in note for note in replicated.notes)
    _same(replicated, full)


def test_gradient_accumulation_and_kept_gradients() -> None:
    """The second micro-batch adds into existing .grad (a new pass signature), and zero_grad(set_to_none=False)."""
    model = _hf(LLMS["llama"]())
    replicated, full = _traces(model, _tokens, amp="bf16", checkpointing=True, grad_accum=2, keep_grads=True)
    assert replicated.replication.used
    _same(replicated, full)


@pytest.mark.parametrize("family", list(LLMS))
def test_kv_cache_of_use_cache_is_replicated(family: str) -> None:
    """Without checkpointing a causal LM with use_cache (the Hub configs' default) hands its blocks a KV cache,
    each writing its own layer (a copy of its keys and values, kept as long as the model's output): the replayed
    blocks' copies are made as the cache's tensors, and the trace equals the full one to the byte."""
    config = LLMS[family]()
    assert config.use_cache
    replicated, full = _traces(_hf(config), _tokens, amp="bf16")
    assert replicated.replication.used and replicated.replication.replayed == 1 + 4, replicated.replication
    _same(replicated, full)


def test_fp32_weights_under_amp() -> None:
    """autocast's cached casts of the weights outlive each block until autocast exits, which frees them (in the
    order they were made, TraceTracker.cache_cleared): the replayed blocks' casts are freed with them."""
    replicated, full = _traces(_hf(LLMS["llama"](), torch.float32), _tokens, amp="bf16", checkpointing=True)
    assert replicated.replication.used
    _same(replicated, full)


@pytest.mark.parametrize("quantize", [None, "nf4"])
def test_lora_and_qlora_under_amp(quantize: Any) -> None:
    """LoRA r=16 (fp32 adapters, whose casts autocast caches) on a bf16 base, and QLoRA (the base nf4): the
    first layer's input needs no gradient (the base is frozen), so layers 1-3 are the run."""
    plan = planned_model(_hf(LLMS["llama"]()), parse_lora("r=16"), parse_quantize(quantize) if quantize else None)
    replicated, full = _traces(plan.model, _tokens, amp="bf16", checkpointing=True)
    assert replicated.replication.used and replicated.replication.replayed == 3
    _same(replicated, full)


def test_fp32_encoder_under_amp() -> None:
    """An fp32 BERT under AMP: its blocks keep casts of their input, not the input, which BERT's forward keeps for
    the first block only (its embedding output): the second block shows what a block keeps."""
    config = transformers.BertConfig(**_SMALL)
    with torch.device("meta"):
        model = transformers.AutoModelForMaskedLM.from_config(config)
    replicated, full = _traces(model, _tokens, amp="bf16")
    assert replicated.replication.used
    _same(replicated, full)


def test_bert_encoder_without_checkpointing() -> None:
    config = transformers.BertConfig(**_SMALL)
    with torch.device("meta"):
        model = transformers.AutoModelForMaskedLM.from_config(config)
    replicated, full = _traces(model, _tokens)
    assert replicated.replication.used
    _same(replicated, full)


class Bottleneck(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width, width // 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width // 2)
        self.conv2 = nn.Conv2d(width // 2, width // 2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width // 2)
        self.conv3 = nn.Conv2d(width // 2, width, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width)

    def forward(self, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = F.relu(self.bn2(self.conv2(out)), inplace=True)
        return F.relu(self.bn3(self.conv3(out)) + x, inplace=True)


class StageNet(nn.Module):
    """A ResNet-like net: a stem, one stage of four identical bottlenecks, a wider stage of three, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.stage1 = nn.Sequential(*[Bottleneck(16) for _ in range(4)])
        self.widen = nn.Conv2d(16, 32, 1, stride=2)
        self.stage2 = nn.Sequential(*[Bottleneck(32) for _ in range(3)])
        self.fc = nn.Linear(32, 10)

    def forward(self, x: Any) -> Any:
        x = self.stage2(self.widen(self.stage1(self.stem(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


@pytest.mark.parametrize("checkpointing", [False, True])
def test_resnet_stages(checkpointing: bool) -> None:
    model = StageNet()
    assert [len(run) for run in block_runs(model, 3)] == [4, 3]  # one run per stage: their shapes differ
    replicated, full = _traces(model, lambda b, fake: torch.randn(b, 3, 16, 16), checkpointing=checkpointing)
    assert replicated.replication.used and replicated.replication.blocks == 7
    _same(replicated, full)


def test_small_models_trace_in_full_by_default() -> None:
    model = _hf(LLMS["llama"]())
    plan = TracePlan(model, "adamw", _tokens, default_loss, amp="bf16", checkpointing=True)
    assert not run_trace(plan, 1).replication.used  # four layers: under MIN_AUTO_RUN


class Odd(nn.Module):
    """A block whose last instance makes one more temporary: a place-dependent path the signature cannot see."""

    def __init__(self, layer_idx: int, last: int) -> None:
        super().__init__()
        self.linear = nn.Linear(32, 32)
        self.layer_idx, self.last = layer_idx, last

    def forward(self, x: Any) -> Any:
        out = self.linear(x).relu()
        if self.layer_idx == self.last:
            out = out * 2
        return out + x


def test_a_last_block_that_differs_reruns_in_full() -> None:
    model = nn.Sequential(*[Odd(i, 4) for i in range(5)], nn.Linear(32, 4))  # the batch needs no gradient:
    # the run is blocks 1-4, of which 3 is replayed before the last is seen
    replicated, full = _traces(model, lambda b, fake: torch.randn(b, 32))
    assert not replicated.replication.used and "did not match" in replicated.replication.reason
    _same(replicated, full)


class Shared(nn.Module):
    """A block over a Linear every block shares (ALBERT's way): autocast casts its weight once, in the first."""

    def __init__(self, linear: Any) -> None:
        super().__init__()
        self.linear = linear

    def forward(self, x: Any) -> Any:
        return self.linear(x).relu() + x


def test_a_weight_shared_by_the_blocks_under_amp_reruns_in_full() -> None:
    """The later blocks find the cast in autocast's cache: the replays' casts do not match, the trace reruns in
    full, and autocast is off afterwards as it was before."""
    linear = nn.Linear(32, 32)
    model = nn.Sequential(nn.Linear(32, 32), *[Shared(linear) for _ in range(5)], nn.Linear(32, 4))
    replicated, full = _traces(model, lambda b, fake: torch.randn(b, 32), amp="bf16")
    assert not replicated.replication.used and "did not match" in replicated.replication.reason
    assert not torch.is_autocast_enabled("cpu")
    _same(replicated, full)
