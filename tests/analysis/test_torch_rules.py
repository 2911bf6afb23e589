"""Per-version torch rules (analysis.fake.torch_rules): each changes the trace only for the versions it names."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpumem_kernel.analysis.fake import torch_rules  # noqa: E402
from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402

BATCH, WIDTH = 64, 256


class SoftmaxNet(torch.nn.Module):
    """Two softmaxes over (BATCH, WIDTH) fp32 activations that no other op keeps."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(WIDTH, WIDTH)
        self.b = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.softmax(self.a(x), dim=-1)
        return self.b(x).softmax(-1)


def _activations(version: str | None) -> int:
    report = analyze(SoftmaxNet(), batch_size=BATCH, input=(WIDTH,), optimizer="sgd", torch_version=version)
    return report.activations_bytes


def test_versions_name_their_rules() -> None:
    r = torch_rules
    if r.running() < (2, 12):
        pytest.skip("the rules below are for a running torch >= 2.12")
    assert r.resolve("1.10").rules == (r.SOFTMAX_SAVES_INPUT, r.RMS_NORM_FP32)  # 2.11+ cache as 1.10 did
    assert r.SOFTMAX_SAVES_INPUT not in r.resolve("1.11").rules
    assert r.resolve("2.1").rules == (r.RMS_NORM_FP32,)
    assert r.resolve("2.2.0+cu121").rules == (r.AUTOCAST_NO_CACHE_NO_GRAD, r.RMS_NORM_FP32)
    assert r.resolve("2.11").rules == (r.RMS_NORM_FP32,)
    assert r.resolve("99.0").rules == ()
    assert all(rule.source.startswith("https://github.com/pytorch/pytorch/") for rule in r.RULES)


def test_unknown_version_falls_back_to_the_running_torch_with_a_note() -> None:
    planned = torch_rules.resolve("banana")
    assert planned.rules == () and planned.version == torch_rules.running()
    assert "not understood" in planned.notes[0]
    report = analyze(SoftmaxNet(), batch_size=8, input=(WIDTH,), optimizer="sgd", torch_version="banana")
    assert any("not understood" in note for note in report.notes)


def test_softmax_before_1_11_keeps_exactly_its_input_more() -> None:
    """Each softmax's input (BATCH x WIDTH fp32) stays alive for backward before 1.11, and only then."""
    now, old, new = _activations(None), _activations("1.10"), _activations("1.11")
    assert new == now
    assert old - now == 2 * BATCH * WIDTH * 4
    report = analyze(SoftmaxNet(), batch_size=8, input=(WIDTH,), optimizer="sgd", torch_version="1.10")
    assert any("softmax-saves-input" in note and "65242" in note for note in report.notes)


def test_softmax_rule_leaves_no_grad_alone() -> None:
    model = SoftmaxNet()
    keep = torch_rules._keep_input_class()
    wrapped = torch_rules._keeping_input(torch.softmax, keep)
    with torch.no_grad():
        out = wrapped(model.a(torch.ones(2, WIDTH)), -1)
    assert out.grad_fn is None


def test_autocast_cache_under_no_grad_only_outside_2_2_to_2_10() -> None:
    """A weight's bf16 cast made under no_grad stays until autocast exits before 2.2 and from 2.11 (the running
    torch's behaviour); 2.2-2.10 made it per use: the evaluation step holds fewer casts at once."""
    if torch_rules.running() < (2, 11):
        pytest.skip("needs a running torch that caches under no_grad")

    def evaluation(version: str | None) -> int:
        report = analyze(
            SoftmaxNet(), batch_size=4, input=(WIDTH,), optimizer="sgd", amp="bf16", eval_batch=4, torch_version=version
        )
        assert report.evaluation is not None
        return report.evaluation.peak_allocated_bytes

    # 2.1-2.3 share their workspace rules (gpus.blas_workspaces): only the cache differs
    assert evaluation("2.1") - evaluation("2.2") >= WIDTH * WIDTH * 2
    assert evaluation("2.2") == evaluation("2.3")


def test_rms_norm_fp32_from_2_12() -> None:
    planned = torch_rules.resolve("2.11")
    assert torch_rules.RMS_NORM_FP32 in planned.rules or torch_rules.running() < (2, 12)


@pytest.mark.parametrize("version", ["2.14", "2.14.1", "2.15", "2.15.0+cu130"])
def test_2_14_and_2_15_are_planned_like_the_newest_rules(version: str) -> None:
    """No rule names 2.14 or 2.15 (nothing they changed alters what is kept): planning for one adds no rule and
    no note, and gives a running torch >= 2.12 (past every rule's change) the same activations."""
    planned = torch_rules.resolve(version)
    assert planned.text == version[:4]  # major.minor
    assert planned.rules == () and planned.notes == ()
    if torch_rules.running() >= (2, 12):
        assert _activations(version) == _activations(None)


def test_a_torch_newer_than_the_rules_know_is_said() -> None:
    known = "{}.{}".format(*torch_rules.KNOWN_THROUGH)
    assert known == "2.15"
    planned = torch_rules.resolve("2.16")
    assert planned.rules == ()
    assert planned.notes == (f"torch 2.16 is newer than the torch rules know ({known}): planned as {known}",)
    report = analyze(SoftmaxNet(), batch_size=8, input=(WIDTH,), optimizer="sgd", torch_version="2.16")
    assert any("newer than the torch rules know" in note for note in report.notes)
