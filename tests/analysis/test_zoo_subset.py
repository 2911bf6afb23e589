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
    from gpumem_kernel.analysis.trace.run import run_trace
    from gpumem_kernel.analysis.trace.plan import TracePlan
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


def test_a_mask_rcnn_trains_within_the_caps_it_declares() -> None:
    """The selects inside a detector stay within the model's own settings: the roi sampler keeps
    box_batch_size_per_image proposals (the masks it writes), the mask head trains on at most its positive fraction
    of them (read from roi_heads.fg_bg_sampler). Before, each select took every proposal and the mask head ran on
    all rpn_post_nms_top_n_train of them (peak 1.9 GiB here, 116 MiB now)."""
    absent = missing("torchvision")
    if absent:
        pytest.skip(absent)
    from benchmarks.zoo.vision import _detection_loss
    from gpumem_kernel.analysis.trace.run import run_trace
    from gpumem_kernel.analysis.trace.plan import TracePlan
    from torch import nn
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.ops import MultiScaleRoIAlign

    size, images, sampled = 256, 2, 64
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, stride=8, padding=1), nn.ReLU())
    backbone.out_channels = 8
    model = MaskRCNN(
        backbone,
        num_classes=5,
        min_size=size,
        max_size=size,
        rpn_anchor_generator=AnchorGenerator(((32,),), ((0.5, 1.0, 2.0),)),
        box_roi_pool=MultiScaleRoIAlign(["0"], 7, 2),
        mask_roi_pool=MultiScaleRoIAlign(["0"], 14, 2),
        rpn_post_nms_top_n_train=300,
        box_batch_size_per_image=sampled,
        box_positive_fraction=0.25,
    )

    def batch(b: int, fake: bool) -> Any:
        import torch

        corner = torch.rand(b, 4, 2) * size / 2
        boxes = torch.cat([corner, corner + size / 4], dim=2)
        masks = torch.zeros(4, size, size, dtype=torch.uint8)
        return [torch.rand(3, size, size) for _ in range(b)], [
            {"boxes": boxes[i], "labels": torch.randint(1, 5, (4,)), "masks": masks} for i in range(b)
        ]

    train = run_trace(TracePlan(model, "sgd", batch, _detection_loss), images)

    # the mask head's fp32 activations per ROI: four 256-channel convs at 14x14, the 28x28 deconv and its logits
    per_roi = 4 * (4 * 256 * 14 * 14 + (256 + 5) * 28 * 28)
    assert train.peak_live < per_roi * sampled * images  # below the mask head on every sampled ROI
    assert any("roi_heads.fg_bg_sampler.batch_size_per_image × positive_fraction" in n for n in train.notes)
    assert any(f"{sampled} of 304 elements selected: at most the elements set in the mask" in n for n in train.notes)
