"""The optimizer's steps recorded by an analysis's first trace and replayed by its others
(analysis.trace.optimizer_replay) against real steps: the same device event stream, figures and peaks, to the byte;
gradients that differ from the recording's run the steps for real; optimizers it cannot follow are never replayed."""

import dataclasses
from typing import Any, Dict

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
nn = torch.nn

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.model.fine_tune import planned_model  # noqa: E402
from gpumem_kernel.analysis.model.lora import parse_lora  # noqa: E402
from gpumem_kernel.analysis.trace.optimizer_replay import OptimizerReplay  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402

VOCAB, TOKENS = 1000, 16
FIGURES = (
    "peak_live",
    "peak_phase",
    "step_peaks",
    "phase_peaks",
    "breakdown",
    "gradients",
    "optimizer_state",
    "optimizer_host",
    "optimizer_transient",
    "activations",
)


def _tokens(batch: int, fake: bool) -> Dict[str, Any]:
    ids = torch.randint(0, VOCAB, (batch, TOKENS))
    return {"input_ids": ids, "labels": ids.clone()}


def _llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def _cnn() -> Any:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def _images(batch: int, fake: bool) -> Any:
    return torch.randn(batch, 3, 32, 32)


def _same(replayed: TraceResult, real: TraceResult) -> None:
    assert replayed.device.events == real.device.events  # every malloc and free, in order, with its size
    for name in FIGURES:
        assert getattr(replayed, name) == getattr(real, name), name
    assert replayed.device.peak_reserved == real.device.peak_reserved
    assert replayed.device.peak_allocated == real.device.peak_allocated


def _replayed_and_real(plan: TracePlan, first: int, batch: int) -> TraceResult:
    box = OptimizerReplay()
    recording = dataclasses.replace(plan, optimizer_replay=box)
    run_trace(recording, first)
    assert box.recording is not None, box.declined
    replayed = run_trace(recording, batch)
    assert box.replays == 1
    _same(replayed, run_trace(plan, batch))
    return replayed


@pytest.mark.parametrize("kind", ["adamw", "adam", "sgd", "sgd-momentum"])
def test_each_replayed_optimizer_gives_the_stream_of_its_real_steps(kind: str) -> None:
    plan = TracePlan(_cnn(), kind, _images, default_loss)
    replayed = _replayed_and_real(plan, 2, 6)
    if kind != "sgd":  # state made by the first step and kept: replayed as optimizer state, on the device
        assert replayed.optimizer_state > 0


@pytest.mark.parametrize(
    "options",
    [
        {"amp": "bf16", "checkpointing": True},
        {"grad_accum": 4},
        {"keep_grads": True},
    ],
    ids=["amp-checkpointing", "grad-accum", "keep-grads"],
)
def test_a_language_model_with_replicated_layers_replays_to_the_byte(options: Dict[str, Any]) -> None:
    plan = TracePlan(_llama(), "adamw", _tokens, default_loss, logits_vocab=VOCAB, **options)
    _replayed_and_real(plan, 1, 3)


def test_lora_adapters_alone_are_stepped_and_replayed() -> None:
    """A frozen base: the optimizer holds the adapters only, and so does its replay."""
    fine = planned_model(_llama(), parse_lora("r=8"), None)
    plan = TracePlan(fine.model, "adamw", _tokens, default_loss, logits_vocab=VOCAB)
    replayed = _replayed_and_real(plan, 2, 5)
    adapters = sum(p.numel() * 4 for p in fine.model.parameters() if p.requires_grad)  # fp32 adapters
    assert replayed.optimizer_state == 2 * adapters  # exp_avg and exp_avg_sq of the adapters, nothing of the base


class _ByBatch(nn.Module):
    """Another layer above batch 4: a step updates other parameters than the recorded one did."""

    def __init__(self) -> None:
        super().__init__()
        self.small, self.large = nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x: Any) -> Any:
        return self.large(x) if x.shape[0] > 4 else self.small(x)


def test_gradients_unlike_the_recorded_ones_run_the_steps_for_real() -> None:
    box = OptimizerReplay()
    plan = TracePlan(_ByBatch(), "adamw", lambda b, fake: torch.randn(b, 32), default_loss, optimizer_replay=box)
    run_trace(plan, 2)
    assert box.recording is not None
    other = run_trace(plan, 8)
    assert box.replays == 0  # not replayed: the trace ran again with its own steps
    _same(other, run_trace(dataclasses.replace(plan, optimizer_replay=None), 8))
    assert other.optimizer_state == 2 * 4 * (32 * 32 + 32)  # the large layer's state, not the recorded small one's


def test_optimizers_it_cannot_follow_are_never_recorded() -> None:
    for kind in ("adafactor", "paged-adamw8bit"):
        box = OptimizerReplay()
        run_trace(TracePlan(_cnn(), kind, _images, default_loss, optimizer_replay=box), 2)
        assert box.recording is None and box.replays == 0, kind
    box = OptimizerReplay()
    model = _cnn()
    user = torch.optim.AdamW(model.parameters())  # the user's own: its state and settings are copied, not replayed
    run_trace(TracePlan(model, user, _images, default_loss, optimizer_replay=box), 2)
    assert box.recording is None


def test_an_analysis_gives_the_same_report_with_and_without_replayed_steps(monkeypatch: Any) -> None:
    """The batch search's traces replay the first trace's steps: the curve, the picks and the figures are the
    ones real steps give."""
    options = dict(batch_size=4, target="T4", optimizer="adamw", amp="bf16")
    replayed = analyze(_cnn(), input=(3, 32, 32), **options)
    real = analyze(_cnn(), input=(3, 32, 32), replay_optimizer=False, **options)
    assert [(p.batch_size, p.peak_bytes) for p in replayed.curve] == [(p.batch_size, p.peak_bytes) for p in real.curve]
    assert len(replayed.curve) >= 4  # a search of several traces, all but the first replaying its steps
    assert replayed.recommendations == real.recommendations
    assert replayed.figures == real.figures
