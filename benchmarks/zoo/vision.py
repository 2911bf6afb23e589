"""timm and torchvision architectures from their constructors (pretrained=False / weights=None: no download),
at full size and their default input resolution."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from benchmarks.zoo.entry import Entry

IMAGE = (3, 224, 224)

# (timm name, input) across families: CNNs, mobile nets, NAS, ViTs, hierarchical and hybrid transformers, MLPs
TIMM: Tuple[Tuple[str, Tuple[int, ...]], ...] = (
    ("resnet18", IMAGE),
    ("resnet50", IMAGE),
    ("resnext50_32x4d", IMAGE),
    ("seresnet50", IMAGE),
    ("res2net50_26w_4s", IMAGE),
    ("resnest14d", IMAGE),
    ("densenet121", IMAGE),
    ("dla34", IMAGE),
    ("dpn68", IMAGE),
    ("vgg11_bn", IMAGE),
    ("inception_v3", (3, 299, 299)),
    ("xception41", (3, 299, 299)),
    ("cspdarknet53", (3, 256, 256)),
    ("hrnet_w18_small", IMAGE),
    ("regnety_016", IMAGE),
    ("efficientnet_b0", IMAGE),
    ("tf_efficientnetv2_b0", IMAGE),
    ("mobilenetv2_100", IMAGE),
    ("mobilenetv3_large_100", IMAGE),
    ("ghostnet_100", IMAGE),
    ("mixnet_s", IMAGE),
    ("rexnet_100", IMAGE),
    ("repvgg_a0", IMAGE),
    ("nfnet_l0", IMAGE),
    ("convnext_tiny", IMAGE),
    ("convnextv2_atto", IMAGE),
    ("vit_small_patch16_224", IMAGE),
    ("deit_tiny_distilled_patch16_224", IMAGE),
    ("beit_base_patch16_224", IMAGE),
    ("eva02_tiny_patch14_224", IMAGE),
    ("cait_xxs24_224", IMAGE),
    ("swin_tiny_patch4_window7_224", IMAGE),
    ("swinv2_tiny_window8_256", (3, 256, 256)),
    ("maxvit_tiny_tf_224", IMAGE),
    ("coat_lite_tiny", IMAGE),
    ("xcit_nano_12_p16_224", IMAGE),
    ("levit_128", IMAGE),
    ("mobilevit_xxs", (3, 256, 256)),
    ("efficientformer_l1", IMAGE),
    ("poolformer_s12", IMAGE),
    ("mixer_b16_224", IMAGE),
    ("fastvit_t8", IMAGE),
    ("edgenext_xx_small", (3, 256, 256)),
)

TV_CLASSIFICATION = (
    "resnet18",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "convnext_tiny",
    "vit_b_16",
    "swin_t",
    "regnet_y_400mf",
    "squeezenet1_0",
    "shufflenet_v2_x0_5",
    "googlenet",
)
TV_SEGMENTATION = ("fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large")
TV_DETECTION = (
    "fasterrcnn_mobilenet_v3_large_320_fpn",
    "fasterrcnn_resnet50_fpn",
    "retinanet_resnet50_fpn",
    "fcos_resnet50_fpn",
    "ssdlite320_mobilenet_v3_large",
    "maskrcnn_resnet50_fpn",
)
DETECTION_SIZE = 320
BOXES = 4  # ground-truth boxes per image


def _timm(name: str) -> Callable[[], Any]:
    def build() -> Any:
        import timm

        return timm.create_model(name, pretrained=False)

    return build


def _torchvision(section: str, name: str, **settings: Any) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision.models as models

        module = getattr(models, section) if section else models
        return getattr(module, name)(weights=None, weights_backbone=None, **settings)

    def build_classifier() -> Any:
        import torchvision.models as models

        return getattr(models, name)(weights=None, **settings)

    return build if section else build_classifier


def _segmentation_loss(output: Any, batch: Any) -> Any:
    return output["out"].float().square().mean()


def _detection_batch(b: int) -> Tuple[List[Any], List[Dict[str, Any]]]:
    """Images and their targets (boxes, labels; masks for Mask R-CNN), as torchvision's detectors train on."""
    import torch

    images = [torch.rand(3, DETECTION_SIZE, DETECTION_SIZE) for _ in range(b)]
    xy = torch.rand(b, BOXES, 2) * DETECTION_SIZE / 2
    boxes = torch.cat([xy, xy + DETECTION_SIZE / 4], dim=2)
    targets = [
        {
            "boxes": boxes[i],
            "labels": torch.randint(1, 91, (BOXES,)),
            "masks": torch.zeros(BOXES, DETECTION_SIZE, DETECTION_SIZE, dtype=torch.uint8),
        }
        for i in range(b)
    ]
    return images, targets


def _detection_loss(output: Any, batch: Any) -> Any:
    """Training: the sum of the detector's losses (a dict); evaluation returns detections, not a loss."""
    if isinstance(output, dict):
        return sum(output.values())
    return output


def timm_entries() -> List[Entry]:
    return [
        Entry(name, "timm", "timm", _timm(name), shape, f"images ({','.join(map(str, shape))})") for name, shape in TIMM
    ]


def torchvision_entries() -> List[Entry]:
    tv = "torchvision"
    out = [Entry(f"tv_{n}", tv, tv, _torchvision("", n), IMAGE, "images (3,224,224)") for n in TV_CLASSIFICATION]
    out += [
        Entry(
            f"tv_{n}",
            tv,
            tv,
            _torchvision("segmentation", n),
            (3, 256, 256),
            "images (3,256,256)",
            loss=_segmentation_loss,
        )
        for n in TV_SEGMENTATION
    ]
    text = f"images (3,{DETECTION_SIZE},{DETECTION_SIZE}) + {BOXES} boxes each"
    out += [
        Entry(f"tv_{n}", tv, tv, _torchvision("detection", n), _detection_batch, text, loss=_detection_loss)
        for n in TV_DETECTION
    ]
    return out
