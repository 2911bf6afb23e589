"""The traced estimator's blind spots: each case against the step the user actually runs.

Every reference here is a trace of the model the user means (their eval-mode submodules, every block
checkpointed by hand, the model's own loss, no KV cache), so a difference is the estimator's choice, not noise.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.request.arguments import parse_shape  # noqa: E402
from gpumem_kernel.analysis.report.render import render_text  # noqa: E402
from gpumem_kernel.render.units import human  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan, TraceResult  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from conftest import gpumem_shell  # noqa: E402
from estimator_accuracy import Decoder as BenchDecoder  # noqa: E402
from estimator_accuracy import ResNet50  # noqa: E402  (one definition for the test and the accuracy row)


def _trace(model: Any, make_batch: Any, batch: int, **options: Any) -> TraceResult:
    return run_trace(TracePlan(model, "adamw", make_batch, options.pop("loss", default_loss), **options), batch)


def _modes(model: Any) -> List[bool]:
    return [m.training for m in model.modules()]


# --- eval-mode submodules ---------------------------------------------------------------------------------


def _mlp(dropout: Any) -> Any:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(64, 256), nn.ReLU(), dropout(), nn.Linear(256, 256), nn.ReLU(), dropout(), nn.Linear(256, 10)
    )


def test_submodules_in_eval_mode_are_traced_as_the_user_left_them() -> None:
    model = _mlp(lambda: nn.Dropout(0.5))
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.eval()  # the user turned dropout off; the root stays in train mode
    before = _modes(model)

    def make_batch(b: int, fake: bool) -> Any:
        return torch.randn(b, 64)

    traced = _trace(model, make_batch, 32)
    without_dropout = _trace(_mlp(nn.Identity), make_batch, 32)  # what an eval-mode Dropout computes

    assert traced.activations == without_dropout.activations
    assert traced.peak_live == without_dropout.peak_live
    report = analyze(model, batch_size=32, input=(64,))
    assert _modes(model) == before  # the user's modes are untouched
    assert any("2 submodule(s) in eval mode" in note for note in report.notes), report.notes


def test_a_model_in_eval_mode_is_traced_in_eval_mode_and_says_so() -> None:
    model = _mlp(lambda: nn.Dropout(0.5)).eval()
    report = analyze(model, batch_size=32, input=(64,))
    plain = analyze(_mlp(nn.Identity), batch_size=32, input=(64,))

    assert report.activations_bytes == plain.activations_bytes
    assert not any(m.training for m in model.modules())
    assert any("eval mode" in note and "as you left it" in note for note in report.notes), report.notes


# --- checkpointing: every repeated block, across stages ------------------------------------------------------


def resnet50_layout() -> nn.Module:
    """The benchmark's ResNet-50 layout (16 bottlenecks in 4 stages) at a width a test can afford."""
    return ResNet50(classes=10, base=4)


class Checkpointed(nn.Module):
    """What a user writes to checkpoint a block by hand."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any) -> Any:
        return checkpoint(self.block, *args, use_reentrant=False)


def test_checkpointing_wraps_every_bottleneck_of_every_stage_and_says_so() -> None:
    torch.manual_seed(0)
    model = resnet50_layout()
    by_hand = resnet50_layout()
    by_hand.load_state_dict(model.state_dict())
    for name in ("layer1", "layer2", "layer3", "layer4"):
        stage = getattr(by_hand, name)
        setattr(by_hand, name, nn.Sequential(*[Checkpointed(block) for block in stage]))

    def images(b: int, fake: bool) -> Any:
        return torch.randn(b, 3, 32, 32)

    traced = _trace(model, images, 4, checkpointing=True)
    reference = _trace(by_hand, images, 4)
    assert traced.peak_live == reference.peak_live
    assert traced.activations == reference.activations
    wrapped = "wrapped 16 Bottleneck blocks (layer1.0-2, layer2.0-3, layer3.0-5, layer4.0-2)"
    assert any(wrapped in note for note in traced.notes), traced.notes


def test_checkpointing_picks_the_outer_blocks_not_the_layers_inside_them() -> None:
    torch.manual_seed(0)
    blocks = nn.ModuleList(
        [nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, 32)) for _ in range(2)]
    )

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = blocks

        def forward(self, x: Any) -> Any:
            for block in self.blocks:
                x = block(x)
            return x

    traced = _trace(Stack(), lambda b, fake: torch.randn(b, 32), 8, checkpointing=True)
    assert any("wrapped 2 Sequential blocks (blocks.0-1)" in note for note in traced.notes), traced.notes


# --- a decoder that owns its loss and its KV cache (HF's ModelOutput contract, plain torch) -----------------------


def decoder(as_object: bool = False) -> nn.Module:
    """The benchmark's decoder stand-in: owns its loss (given labels) and a KV cache (config.use_cache)."""
    return BenchDecoder(vocab=256, context=48, dim=64, depth=3, heads=4, as_object=as_object)


def _tokens(b: int, fake: bool) -> Any:
    ids = torch.randint(0, 256, (b, 48))
    return {"input_ids": ids, "labels": ids}


def _decoder(**options: Any) -> nn.Module:
    torch.manual_seed(0)
    model = decoder(**options)
    model.config.use_cache = False
    return model


def _own_loss(output: Any, batch: Any) -> Any:
    return output["loss"] if isinstance(output, dict) else output.loss


@pytest.mark.parametrize("as_object", [False, True], ids=["dict", "attribute"])
def test_the_models_own_loss_is_used_and_reported(as_object: bool) -> None:
    traced = _trace(_decoder(as_object=as_object), _tokens, 4)
    reference = _trace(_decoder(as_object=as_object), _tokens, 4, loss=_own_loss)

    assert traced.peak_live == reference.peak_live
    assert traced.activations == reference.activations
    report = analyze(_decoder(as_object=as_object), batch_size=4, input=_tokens_sample())
    assert report.settings["loss"] == "the model's own (output.loss)"
    assert any("the model's own loss" in note for note in report.notes), report.notes


def _tokens_sample() -> Dict[str, Any]:
    torch.manual_seed(1)
    ids = torch.randint(0, 256, (2, 48))
    return {"input_ids": ids, "labels": ids.clone()}


def test_checkpointing_turns_the_kv_cache_off_on_the_copy_only() -> None:
    cached = _decoder()
    cached.config.use_cache = True
    traced = _trace(cached, _tokens, 4, checkpointing=True)
    reference = _trace(_decoder(), _tokens, 4, checkpointing=True)

    assert traced.peak_live == reference.peak_live
    assert cached.config.use_cache is True  # the user's config is untouched
    assert any("use_cache" in note for note in traced.notes), traced.notes
    plain = _trace(cached, _tokens, 4)  # without checkpointing the cache is the user's choice
    assert not any("use_cache" in note for note in plain.notes)


# --- the same contracts on a Hugging Face model built from a config (no download) ---------------------------------


def _gpt2(use_cache: bool) -> Any:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4, use_cache=use_cache
    )
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def test_hugging_face_loss_and_kv_cache() -> None:
    model = _gpt2(use_cache=True)
    own = _trace(model, _tokens, 4)
    reference = _trace(model, _tokens, 4, loss=lambda out, batch: out.loss)
    assert own.peak_live == reference.peak_live
    assert any("the model's own loss" in note for note in own.notes)

    checkpointed = _trace(model, _tokens, 4, checkpointing=True)
    no_cache = _trace(_gpt2(use_cache=False), _tokens, 4, checkpointing=True)
    assert checkpointed.peak_live == no_cache.peak_live
    assert model.config.use_cache is True
    assert any("2 GPT2Block blocks" in note for note in checkpointed.notes), checkpointed.notes


# --- the --input hint is accepted as written ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, shape",
    [
        ("(512,)", (512,)),
        ("(3, 224, 224)", (3, 224, 224)),
        ("[3,224,224]", (3, 224, 224)),
        ("3x224x224", (3, 224, 224)),
        ("512", (512,)),
    ],
)
def test_shapes_read_in_the_tuple_form_too(text: str, shape: Any) -> None:
    assert parse_shape(text) == shape


@pytest.mark.parametrize("first", ["embedding", "conv"])
def test_the_python_hint_is_accepted_verbatim(first: str) -> None:
    model = _hint_models()[first]
    with pytest.raises(ValueError) as info:
        analyze(model, batch_size=2)
    hint = re.search(r"e\.g\. input=(.+)$", str(info.value))
    assert hint is not None, str(info.value)
    for value in (hint.group(1), eval(hint.group(1))):  # as text, and as the Python value it spells
        assert analyze(model, batch_size=2, input=value).parameters_bytes > 0


def _hint_models() -> Dict[str, Any]:
    torch.manual_seed(0)
    return {
        "embedding": nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 4)),
        "conv": nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)),
    }


@pytest.fixture()
def ip() -> Any:
    with gpumem_shell({f"hint_{k}": v for k, v in _hint_models().items()}) as shell:
        yield shell


@pytest.mark.parametrize("first", ["embedding", "conv"])
def test_the_magic_hint_is_accepted_verbatim(ip: Any, first: str) -> None:
    from IPython.utils.capture import capture_output

    with capture_output() as failed:
        ip.run_cell(f"%gpumem analyze hint_{first} -b 2")
    hint = re.search(r"e\.g\. (--input .+)$", failed.stderr.strip())
    assert hint is not None, failed.stderr
    with capture_output() as captured:
        ip.run_cell(f"%gpumem analyze hint_{first} -b 2 {hint.group(1)}")
    assert captured.stderr == "", captured.stderr
    assert len(captured.outputs) == 1


# --- every total in the text report is the sum a reader computes, or says what it is ----------------------------------


def _lines(text: str) -> Dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = re.match(r"  ([^:]+):\s+(.*)$", line)
        if match:
            found.setdefault(match.group(1), match.group(2))
    return found


def _value(text: str) -> str:
    return text.split(" (")[0]


@pytest.mark.parametrize(
    "options", [{}, {"target": "RTX 4080 Super"}, {"memory": "8GiB"}], ids=["no-device", "target", "memory"]
)
def test_report_totals_are_the_sums_of_their_lines(options: Dict[str, Any]) -> None:
    report = analyze(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)), batch_size=8, **options)
    payload = report.to_payload()
    lines = _lines(render_text(payload))
    model = (
        payload["parameters_bytes"] + payload["buffers_bytes"] + payload["gradients_bytes"] + payload["optimizer_bytes"]
    )
    batch = (
        payload["input_bytes"]
        + payload["activations_bytes"]
        + payload["autocast_cache_bytes"]
        + payload["temporary_bytes"]
    )
    assert _value(lines["Total Model"]) == human(model)
    assert _value(lines["Total Batch"]) == human(batch)
    assert _value(lines["Model + Batch"]) == human(model + batch)
    context = payload["context_bytes"] if payload["device"]["context_source"] == "estimate" else 0
    assert (
        _value(lines["Peak Footprint"])
        == human(payload["peak_reserved_bytes"] + context)
        == human(payload["peak_bytes"])
    )
    assert _value(lines["CUDA Context"]) == human(context) or "not counted" in lines["CUDA Context"]
    if payload["device"]["source"] == "none":
        assert "a CUDA GPU" in lines["Workspaces"]


def test_a_context_already_in_use_is_labelled_not_added() -> None:
    payload = analyze(nn.Linear(8, 8), batch_size=4, memory="8GiB").to_payload()
    payload["device"].update(context_source="nvml", context_bytes=300 << 20)
    payload["peak_bytes"] = payload["peak_reserved_bytes"]
    lines = _lines(render_text(payload))
    assert _value(lines["Peak Footprint"]) == human(payload["peak_reserved_bytes"])
    assert "not added" in lines["CUDA Context"]
