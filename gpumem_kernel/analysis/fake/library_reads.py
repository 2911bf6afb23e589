"""Value reads inside libraries' own code that a fake trace answers as the worst case for memory, or as a valid
batch answers them, for the duration of a trace.

torchvision's detectors read values where no size rule (analysis.fake.size_hints) applies:
- training draws the image size at random (`GeneralizedRCNNTransform.torch_choice`, `.item()` of a uniform draw):
  the largest of the model's sizes is taken, the step's largest memory (one size: the same answer);
- Mask R-CNN's evaluation resizes each mask to its predicted box and pastes it into the image
  (`paste_mask_in_image` reads the box's corners): each box is taken as the whole image, the largest resize;
- the forward checks the target boxes and only raises on a degenerate one (`if degenerate_boxes.any():`): a
  valid batch answers False.
- batched_nms loops over the classes (unique, then nms per class) on the CPU above 1000 boxes, where CUDA runs one
  nms over class-offset boxes up to 25000 (torchvision 0.28): the trace, on fake CPU tensors, takes CUDA's path.
The first three are swapped on their loaded class or module (restored on exit, also when the trace fails); the
check is answered by the line that asks it, so no other read of the same forward is answered.

A select (analysis.fake.size_hints) whose count the model itself caps, where no rule on the tensors shows it, takes the
cap read from the model's own settings on the line that selects (`select_cap`):
- Mask R-CNN's mask head trains on the sampled positives (`torch.where(labels[img_id] > 0)`), at most
  `fg_bg_sampler.batch_size_per_image × positive_fraction` per image (BalancedPositiveNegativeSampler's num_pos;
  the sampled labels are gathered, so the sampler's masks, analysis.fake.mask_counts, do not reach them).
The caps torchvision slices to (post_nms_top_n, detections_per_img) need no entry: a slice's size is its own.

No library is imported here: one the user has not loaded cannot be in their model."""

from __future__ import annotations

import linecache
import sys
from typing import Any, Callable, List, Optional, Tuple

Swap = Tuple[Any, str, Any]  # (owner, attribute, the original to restore)

# reads in libraries' input checks whose True branch only raises: (the file from its package, the code read)
_VALID_BATCH_CHECKS = (("torchvision/models/detection/", "if degenerate_boxes.any():"),)


def _largest_size(self: Any, k: List[int]) -> int:
    """GeneralizedRCNNTransform.torch_choice: the largest training size, not a random one."""
    return max(k)


def _paste_whole_image(mask: Any, box: Any, im_h: int, im_w: int) -> Any:
    """roi_heads.paste_mask_in_image with the box spanning the image: the mask resized to (im_h, im_w) and pasted."""
    import torch

    resized = torch.nn.functional.interpolate(
        mask.expand((1, 1, -1, -1)), size=(im_h, im_w), mode="bilinear", align_corners=False
    )[0][0]
    im_mask = torch.zeros((im_h, im_w), dtype=resized.dtype, device=resized.device)
    im_mask[:, :] = resized
    return im_mask


def _coordinate_trick(boxes: Any, scores: Any, idxs: Any, iou_threshold: float) -> Any:
    """torchvision.ops.boxes._batched_nms_vanilla as CUDA runs batched_nms: one nms over class-offset boxes."""
    return sys.modules["torchvision.ops.boxes"]._batched_nms_coordinate_trick(boxes, scores, idxs, iou_threshold)


# (the module that defines it, the class holding it or None for a module function, its name, the worst case)
_WORST_CASES: Tuple[Tuple[str, Optional[str], str, Callable[..., Any]], ...] = (
    ("torchvision.models.detection.transform", "GeneralizedRCNNTransform", "torch_choice", _largest_size),
    ("torchvision.models.detection.roi_heads", None, "paste_mask_in_image", _paste_whole_image),
    ("torchvision.ops.boxes", None, "_batched_nms_vanilla", _coordinate_trick),
)


def swap_worst_cases() -> List[Swap]:
    """Swap in each loaded library's worst case; the swaps made, for the caller to restore in reverse."""
    swapped: List[Swap] = []
    for module_name, class_name, name, worst in _WORST_CASES:
        owner = sys.modules.get(module_name)
        if owner is not None and class_name is not None:
            owner = getattr(owner, class_name, None)
        original = vars(owner).get(name) if owner is not None else None
        if callable(original):
            swapped.append((owner, name, original))
            setattr(owner, name, worst)
    return swapped


def _sampled_positives(heads: Any) -> int:
    """RoIHeads: the sampler's positives per image, int(batch_size_per_image * positive_fraction)."""
    sampler = heads.fg_bg_sampler
    return int(sampler.batch_size_per_image * sampler.positive_fraction)


# selects the model caps: (the file from its package, the code read, the cap from the frame's `self`, its name)
_SELECT_CAPS: Tuple[Tuple[str, str, Callable[[Any], int], str], ...] = (
    (
        "torchvision/models/detection/roi_heads.py",
        "pos = torch.where(labels[img_id] > 0)[0]",
        _sampled_positives,
        "roi_heads.fg_bg_sampler.batch_size_per_image × positive_fraction (the model's sampled positives per image)",
    ),
)


def select_cap(frame: Any, short: Callable[[str], str]) -> Optional[Tuple[int, str]]:
    """(the cap, what it is) where `frame` (the innermost outside torch) selects on a line whose count the model
    caps by its own settings, read from the frame's `self`; None for any other line or a model without them."""
    path = short(frame.f_code.co_filename)
    for prefix, selects, cap, name in _SELECT_CAPS:
        if path.startswith(prefix) and linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip() == selects:
            try:
                return cap(frame.f_locals["self"]), name
            except (KeyError, AttributeError, TypeError, ValueError):
                return None  # a changed library: no cap, the select's own bound stands
    return None


def valid_batch_answer(frame: Any, short: Callable[[str], str]) -> Optional[bool]:
    """False where `frame` (the innermost outside torch) is a library's check that only raises on an invalid batch;
    None for any other read."""
    path = short(frame.f_code.co_filename)
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    for prefix, checked in _VALID_BATCH_CHECKS:
        if path.startswith(prefix) and code == checked:
            return False
    return None
