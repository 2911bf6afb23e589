"""Make torchvision importable where its compiled ops cannot load (a CUDA wheel next to a CPU torch).

PyPI has no CPU torchvision: the wheel matching torch's release links libtorch_cuda, so on a CPU-only torch
`torchvision/_C.so` does not load, and `import torchvision` then fails in its own `_meta_registrations`
(`register_fake("torchvision::nms")` needs the operator to exist). Declaring the two operators' schemas
first lets torchvision import; nms and qnms then have torchvision's own fake kernels (enough for FakeTensors)
and no real kernel (ops.nms's check for _C is passed).

roi_align is declared too, with torchvision's meta kernels and the compiled op's autograd (it saves the rois and
the input's shape, as roi_align_kernel.cpp's autograd does): without _C torchvision falls back to a Python
roi_align whose intermediates grow with the whole feature map per box, which a GPU never allocates (a Mask R-CNN
traced that way peaked at tens of TiB).
"""

from __future__ import annotations

from typing import Any, Optional

_LIBRARY: Optional[Any] = None  # kept alive: dropping a torch.library.Library removes its operators
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "SymInt batch_size, SymInt channels, SymInt height, SymInt width, int sampling_ratio, bool aligned) -> Tensor",
)


def _compiled_ops_load() -> bool:
    import importlib.util
    from pathlib import Path

    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return True  # not installed: nothing to declare, the import fails on its own
    library = next(Path(spec.origin).parent.glob("_C*.so"), None)
    if library is None:
        return False
    try:
        torch.ops.load_library(str(library))
    except (OSError, RuntimeError):
        return False
    return True


def ensure_importable() -> None:
    """Declare torchvision's nms/qnms schemas when its _C cannot load; a no-op when it can (or was done)."""
    global _LIBRARY
    if _LIBRARY is not None or _compiled_ops_load():
        return
    import torch

    _LIBRARY = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _LIBRARY.define(schema)
    import torchvision.ops.boxes as boxes

    # ops.nms asserts that _C loaded; declared, nms has torchvision's fake kernel: all a fake trace calls
    boxes._assert_has_ops = lambda: None
    _declare_roi_align(_LIBRARY)


def _declare_roi_align(library: Any) -> None:
    """roi_align as the compiled op: torchvision's meta kernels, and its autograd calling _roi_align_backward."""
    import importlib

    import torch
    import torchvision._meta_registrations as metas

    # the module, not `import torchvision.ops.roi_align as module`: torchvision.ops binds that name to the function
    module = importlib.import_module("torchvision.ops.roi_align")

    library.impl("roi_align", metas.meta_roi_align, "Meta")
    library.impl("_roi_align_backward", metas.meta_roi_align_backward, "Meta")

    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        ctx.rois = inputs[1]
        ctx.args = inputs[2:]
        ctx.shape = tuple(inputs[0].shape)

    def backward(ctx: Any, grad: Any) -> Any:
        scale, height, width, ratio, aligned = ctx.args
        batch, channels, rows, cols = ctx.shape
        grad_input = torch.ops.torchvision._roi_align_backward(
            grad, ctx.rois, scale, height, width, batch, channels, rows, cols, ratio, aligned
        )
        return grad_input, None, None, None, None, None, None

    torch.library.register_autograd("torchvision::roi_align", backward, setup_context=setup_context)
    module._has_ops = lambda: True  # MultiScaleRoIAlign then calls the declared op, not the Python fallback
    module._assert_has_ops = lambda: None
