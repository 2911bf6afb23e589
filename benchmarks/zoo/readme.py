"""The zoo's section of benchmarks/README.md (make_readme.py calls section() with results/zoo.json)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

HEAD = "## 9. Model zoo: public architectures that must analyse (issue 24)\n\n"
RUN = "PYTHONPATH=. nice -n 10 .venv/bin/python -m benchmarks.zoo"
INSTALL = ".venv/bin/pip install --no-deps --target benchmarks/zoo/.packages -r benchmarks/zoo/requirements.txt"


def _families(summary: Dict[str, Any]) -> str:
    return ", ".join(f"{name} {c['analysed']}/{c['total']}" for name, c in summary["families"].items())


def _exceptions(models: List[Dict[str, Any]]) -> str:
    failed = [m for m in models if m["ok"] is False]
    skipped = [m for m in models if m["ok"] is None]
    lines = ["| model | family | stage | reason |", "|---|---|---|---|"]
    lines += [f"| {m['name']} | {m['family']} | {m['stage']} | {m['reason']} |" for m in failed + skipped]
    return "\n".join(lines) if failed or skipped else "None: every entry analysed."


# Published peak training memory of the same architectures, 2 images per GPU, fp32, in the tables' "GB" (both log
# torch.cuda.max_memory_allocated() / 1024**2 and print it / 1024: GiB). Both train COCO at a short side of 800 (up
# to 1333), from ImageNet weights with the stem and res2 frozen and FrozenBatchNorm. Sources, the R50-FPN 1x rows:
# detectron2: github.com/facebookresearch/detectron2/blob/main/MODEL_ZOO.md
# maskrcnn-benchmark (NVIDIA's copy):
#   github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/Segmentation/MaskRCNN/pytorch/MODEL_ZOO.md
PUBLISHED = {
    "tv_fasterrcnn_resnet50_fpn": "3.0 (detectron2), 4.4 (maskrcnn-benchmark)",
    "tv_maskrcnn_resnet50_fpn": "3.4 (detectron2), 5.2 (maskrcnn-benchmark)",
    "tv_retinanet_resnet50_fpn": "3.9 (detectron2)",
}
GAP = (
    "The zoo's step differs both ways: 800×800 images (the 320-pixel inputs upscaled by min_size=800; COCO's are "
    "about 800×1067), every layer trained with BatchNorm (weights=None), and each data-dependent count at its "
    "bound: 2000 proposals per image after NMS (rpn post_nms_top_n), the sampler's 512 ROIs and 128 positives."
)


def _detectors(models: List[Dict[str, Any]]) -> str:
    """The detectors' predicted training peaks beside the published figures of the same architecture."""
    rows = [m for m in models if m["name"] in PUBLISHED and m.get("ok")]
    lines = ["| model | batch | predicted peak reserved (GiB) | published (GiB) |", "|---|---|---|---|"]
    lines += [
        f"| {m['name']} | {m['batch']} | {m['peak_reserved_bytes'] / 2**30:.2f} | {PUBLISHED[m['name']]} |"
        for m in rows
    ]
    return "Detectors against published training memory (2 images per GPU):\n\n" + "\n".join(lines) + f"\n\n{GAP}\n"


def section(result: Optional[Dict[str, Any]], provenance: Any = None) -> str:
    if result is None:
        return HEAD + f"**Figure:** not measured: run `{RUN}` (extra packages: benchmarks/zoo/requirements.txt).\n"
    s, models = result["summary"], result["models"]
    share = 1 - s["analysed"] / s["tried"] if s["tried"] else 0.0
    figure = (
        f"**Figure:** {s['analysed']}/{s['tried']} architectures analysed, training step and evaluation "
        f"({_families(s)}); {s['tried'] - s['analysed']} exceptions ({share:.1%} of the zoo, target at most 5 %), "
        f"{s['skipped']} skipped (package not installed) of {s['total']}. Seconds per model (training analysis "
        f"and evaluation, one `analyze(eval_batch=)` call): median {s['median_seconds']}, max {s['max_seconds']}."
    )
    body = f"Exceptions, each with the analysis's one-line reason:\n\n{_exceptions(models)}\n\n{_detectors(models)}"
    return HEAD + figure + "\n\n" + body + ("\n" + provenance(result) + "\n" if provenance else "")
