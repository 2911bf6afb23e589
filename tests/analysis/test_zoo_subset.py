"""A subset of the model zoo (benchmarks/zoo, the same definition the benchmark runs), one or two entries per
family: each runs the training-step analysis and the evaluation analysis. An entry whose package is not installed
(the zoo's extra packages live in benchmarks/zoo/.packages, see its requirements.txt) is skipped with the reason."""

import sys
from typing import Any
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: benchmarks.zoo

from benchmarks.zoo.definition import by_name  # noqa: E402
from benchmarks.zoo.packages import missing  # noqa: E402
from benchmarks.zoo.runner import run_entry  # noqa: E402

# small entries of different families (shrunk LLM configs, mobile CNNs, a tiny UNet): under a minute on 2 cores
SUBSET = (
    "Llama +mask",
    "resnet18",
    "mobilevit_xxs",
    "tv_mobilenet_v3_small",
    "tv_lraspp_mobilenet_v3_large",
    "UNet2DModel",
)


@pytest.mark.parametrize("name", SUBSET)
def test_zoo_entry_analyses_training_and_evaluation(name: str) -> None:
    entry = by_name()[name]
    absent = missing(entry.package)
    if absent:
        pytest.skip(absent)
    row = run_entry(entry)
    assert row["ok"], f"{row['stage']}: {row['reason']}"
    assert row["peak_reserved_bytes"] > row["eval_peak_reserved_bytes"] > 0


def test_a_torchvision_detector_traces_training_and_evaluation() -> None:
    """Faster R-CNN reads values the fake trace answers: its random training size (the largest), the targets'
    validity check (valid), nms's kept boxes (every box by default, noted), and the swaps end with the trace."""
    absent = missing("torchvision")
    if absent:
        pytest.skip(absent)
    from benchmarks.zoo.vision import _detection_batch, _detection_loss
    from gpumem_kernel.analysis.trace import run_trace
    from gpumem_kernel.analysis.trace_plan import TracePlan
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    choice = GeneralizedRCNNTransform.torch_choice
    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None)

    def trace(evaluation: bool) -> Any:
        plan = TracePlan(model, "sgd", lambda b, fake: _detection_batch(b), _detection_loss, evaluation=evaluation)
        return run_trace(plan, 1)

    train = trace(evaluation=False)
    assert any(n.startswith("torchvision.nms (boxes kept) at ") and "default" in n for n in train.notes)
    assert trace(evaluation=True).peak_live > 0
    assert GeneralizedRCNNTransform.torch_choice is choice
