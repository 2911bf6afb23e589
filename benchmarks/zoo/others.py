"""Ultralytics YOLO detectors from the yaml model configs shipped in the package (no weights), trained with their
own detection loss (target assignment included); diffusers' UNets from small configs."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

from benchmarks.zoo.entry import Entry

YOLO_SIZE = 640
YOLO_BOXES = 4  # ground-truth boxes per image
YOLO = (
    ("YOLOv5n", "yolov5n.yaml"),
    ("YOLOv8n", "yolov8n.yaml"),
    ("YOLO11n", "yolo11n.yaml"),
    ("YOLOv8s", "yolov8s.yaml"),
)
UNET_SHRUNK = "sample 32x32, blocks (64, 128), 1 layer per block, cross-attention 256"


def _yolo(config: str) -> Callable[[], Any]:
    def build() -> Any:
        import torch
        from ultralytics.cfg import get_cfg
        from ultralytics.nn.tasks import DetectionModel

        class YoloStep(torch.nn.Module):
            """What Ultralytics' trainer and validator call: the loss of a labelled batch when training (the
            hyperparameters are the default config's box/cls/dfl gains), the detections when evaluating."""

            def __init__(self) -> None:
                super().__init__()
                self.model = DetectionModel(config, verbose=False)
                self.model.args = get_cfg()

            def forward(self, img: Any, batch_idx: Any, cls: Any, bboxes: Any) -> Any:
                if not self.training:
                    return self.model(img)
                loss, _items = self.model.loss({"img": img, "batch_idx": batch_idx, "cls": cls, "bboxes": bboxes})
                return loss.sum()

        return YoloStep()

    return build


def _yolo_batch(b: int) -> Dict[str, Any]:
    """Ultralytics' collated batch: images, and per box its image index, class and normalised xywh."""
    import torch

    n = b * YOLO_BOXES
    return {
        "img": torch.rand(b, 3, YOLO_SIZE, YOLO_SIZE),
        "batch_idx": torch.arange(b).repeat_interleave(YOLO_BOXES).float(),
        "cls": torch.randint(0, 80, (n, 1)).float(),
        "bboxes": torch.cat([torch.rand(n, 2) * 0.5 + 0.25, torch.rand(n, 2) * 0.2 + 0.05], dim=1),
    }


def _yolo_loss(output: Any, batch: Any) -> Any:
    """The model's detection loss when training; evaluation has no loss (its output is not used)."""
    return output


def _unet(conditional: bool) -> Callable[[], Any]:
    def build() -> Any:
        import diffusers

        common: Dict[str, Any] = dict(sample_size=32, block_out_channels=(64, 128), layers_per_block=1)
        if not conditional:
            return diffusers.UNet2DModel(
                in_channels=3,
                out_channels=3,
                down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                up_block_types=("AttnUpBlock2D", "UpBlock2D"),
                **common,
            )
        return diffusers.UNet2DConditionModel(
            in_channels=4,
            out_channels=4,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=256,
            **common,
        )

    return build


def _unet_batch(conditional: bool) -> Callable[[int], Dict[str, Any]]:
    def make(b: int) -> Dict[str, Any]:
        import torch

        channels = 4 if conditional else 3
        batch: Dict[str, Any] = {
            "sample": torch.randn(b, channels, 32, 32),
            "timestep": torch.randint(0, 1000, (b,)),
        }
        if conditional:
            batch["encoder_hidden_states"] = torch.randn(b, 77, 256)
        return batch

    make.__name__ = "latents_text" if conditional else "images"
    return make


def _unet_loss(output: Any, batch: Any) -> Any:
    return output.sample.float().square().mean()


def entries() -> List[Entry]:
    yolo = [
        Entry(
            name,
            "ultralytics",
            "ultralytics",
            _yolo(config),
            _yolo_batch,
            f"images (3,{YOLO_SIZE},{YOLO_SIZE}) + {YOLO_BOXES} boxes each",
            loss=_yolo_loss,
        )
        for name, config in YOLO
    ]
    unets = [
        Entry(
            "UNet2DModel",
            "diffusers",
            "diffusers",
            _unet(False),
            _unet_batch(False),
            "images (3,32,32) + timestep",
            loss=_unet_loss,
            size=UNET_SHRUNK,
        ),
        Entry(
            "UNet2DConditionModel",
            "diffusers",
            "diffusers",
            _unet(True),
            _unet_batch(True),
            "latents (4,32,32) + timestep + text (77,256)",
            loss=_unet_loss,
            size=UNET_SHRUNK,
        ),
    ]
    return yolo + unets
