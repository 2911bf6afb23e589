"""The evaluation step: model.eval() under torch.no_grad(), forward only.

The traced (fake) evaluation step against an independent StorageTracker on a real CPU evaluation loop, to the
byte, for a CNN with BatchNorm, an MLP with dropout and a TransformerEncoder (dropout, eval fast path).
`pytest -s tests/analysis/test_evaluation.py` prints the table.
"""

from typing import Any, Callable, Dict, Tuple

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import gpumem_kernel  # noqa: E402
from gpumem_kernel.analysis.allocator.storage import make_tracker, register_states  # noqa: E402
from gpumem_kernel.analysis.trace.run import run_trace  # noqa: E402
from gpumem_kernel.analysis.trace.plan import TracePlan  # noqa: E402
from gpumem_kernel.analysis.trace.training_loop import default_loss  # noqa: E402
from test_analysis_trace import ARCHITECTURES  # noqa: E402  (the same models as the training-step comparison)


def _mlp() -> Any:
    return nn.Sequential(nn.Linear(128, 256), nn.Dropout(0.3), nn.GELU(), nn.Linear(256, 256), nn.Linear(256, 10))


MODELS: Dict[str, Tuple[Callable[[], Any], Callable[[int, bool], Any], int]] = {
    "CNN+BatchNorm": (ARCHITECTURES["CNN+BatchNorm"][0], ARCHITECTURES["CNN+BatchNorm"][1], 24),
    "MLP+Dropout": (_mlp, lambda b, fake: torch.randn(b, 128), 96),
    "TransformerEncoder": (ARCHITECTURES["TransformerEncoder"][0], ARCHITECTURES["TransformerEncoder"][1], 12),
}


def _real_eval_peak(model: Any, make_batch: Callable[[int, bool], Any], batch: int, steps: int = 2) -> int:
    """The user's evaluation loop on real CPU tensors, under an independent tracker: its peak live bytes."""
    was_training = model.training
    model.eval()
    tracker = make_tracker()
    try:
        with tracker:
            register_states(tracker, model)
            with torch.no_grad():
                out = x = None
                for _ in range(steps):
                    x = make_batch(batch, False)
                    out = model(x)
                del out, x
        return tracker.peak
    finally:
        tracker.close()
        model.train(was_training)


def test_traced_evaluation_peak_matches_a_real_cpu_evaluation_step_to_the_byte() -> None:
    rows = []
    for name, (make_model, make_batch, batch) in MODELS.items():
        torch.manual_seed(0)
        model = make_model()
        plan = TracePlan(model, "adamw", make_batch, default_loss, evaluation=True)
        traced = run_trace(plan, batch, fake=True)
        real = _real_eval_peak(model, make_batch, batch)
        rows.append((name, batch, traced.peak_live, real))
        assert model.training  # the user's model is left in train mode
        assert traced.gradients == 0 and traced.optimizer_state == 0
        assert traced.breakdown["gradient"] == 0 and traced.breakdown["optimizer_state"] == 0
    print(f"\n{'model':<20}{'batch':>6}{'traced eval peak':>18}{'real CPU eval peak':>20}{'diff':>6}")
    for name, batch, traced_peak, real_peak in rows:
        print(f"{name:<20}{batch:>6}{traced_peak:>18,}{real_peak:>20,}{traced_peak - real_peak:>6}")
    for name, _, traced_peak, real_peak in rows:
        assert traced_peak == real_peak, name


def test_evaluation_needs_less_than_training_and_dropout_batchnorm_run_in_eval_mode() -> None:
    make_model, make_batch, batch = MODELS["CNN+BatchNorm"]
    torch.manual_seed(0)
    model = make_model()
    train = run_trace(TracePlan(model, "adamw", make_batch, default_loss), batch, fake=True)
    evaluation = run_trace(TracePlan(model, "adamw", make_batch, default_loss, evaluation=True), batch, fake=True)
    assert evaluation.peak_live < train.peak_live
    assert evaluation.activations < train.activations
    assert set(evaluation.phase_peaks) <= {"input", "forward", "other"}


def test_analyze_reports_the_evaluation_batch_and_the_largest_that_fits() -> None:
    torch.manual_seed(0)
    model = _mlp()
    report = gpumem_kernel.analyze(model, batch_size=64, input=(128,), memory="2GiB", eval_batch=256)
    ev = report.evaluation
    assert ev is not None and ev.batch == 256 and ev.training_batch == 64
    assert ev.engine == "traced"
    assert ev.rule_of_thumb_batch == 83  # 1.3 x 64, rounded down
    assert ev.max_batch is not None and ev.max_batch > report.recommendations.maximum  # no gradients, no state
    assert ev.peak_allocated_bytes > 0 and ev.peak_bytes >= ev.peak_reserved_bytes
    payload = report.to_payload()
    assert payload["evaluation"]["max_batch"] == ev.max_batch
    assert gpumem_kernel.analyze(model, batch_size=64, input=(128,), memory="2GiB").evaluation is None


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "8"])
def test_a_bad_evaluation_batch_is_one_clear_line(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^eval_batch must be a positive integer, got"):
        gpumem_kernel.analyze(_mlp(), batch_size=8, input=(128,), eval_batch=bad)


def test_an_evaluation_step_that_cannot_trace_is_one_line() -> None:
    class TrainOnly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(128, 10)

        def forward(self, x: Any) -> Any:
            if not self.training:
                raise RuntimeError("no evaluation here")
            return self.fc(x)

    with pytest.raises(ValueError) as caught:
        gpumem_kernel.analyze(TrainOnly(), batch_size=8, input=(128,), eval_batch=16)
    message = str(caught.value)
    assert message == "the evaluation step at batch 16 could not be traced: RuntimeError: no evaluation here"
