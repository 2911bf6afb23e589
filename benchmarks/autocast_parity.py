"""Row 3c: does the trace run each GPU-suite architecture's forward as CUDA dispatches it?

For every architecture of benchmarks/gpu/models.py (their small dry-run variants: the dispatch does not depend on
size), one training-mode forward and loss runs twice on fake tensors:

- CUDA: fake CUDA tensors under PyTorch's own CUDA autocast kernels (bf16), or none (fp32);
- trace: fake CPU tensors under CPU autocast and cuda_kernels.cuda_kernels(), as the estimator runs it.

Each aten op that makes tensors is recorded with its outputs' dtypes and shapes, and the two sequences are compared.
Needs a CUDA build of torch (a CPU build cannot index a fake CUDA tensor), not a GPU: run it with the GPU image's
packages, e.g. `PYTHONPATH=. ~/.cache/gpumem-gpu-image-venv/bin/python benchmarks/autocast_parity.py` after
scripts/rehearse_gpu_image.sh. Backward is not compared: autograd needs a CUDA driver even for fake tensors.

Two things fake CUDA cannot decide are set as an H100 decides them, and said so in the result:
scaled_dot_product_attention runs flash attention for bf16/fp16 without a mask and memory-efficient attention
otherwise (after CUDA's own conversion of a boolean mask to an additive one), and CUDA's batch norm is named
cudnn_batch_norm with an empty reserve where the CPU calls native_batch_norm (the same tensors kept).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from benchmarks._common import write_result  # noqa: E402
from benchmarks.gpu import models  # noqa: E402
from gpumem_kernel.analysis import cuda_kernels  # noqa: E402

Out = Tuple[str, Tuple[int, ...]]
Op = Tuple[str, Tuple[Out, ...]]

_VIEWS = {"view", "_unsafe_view", "permute", "unsqueeze", "squeeze", "expand", "alias", "t", "transpose", "detach"}
_VIEWS |= {"slice", "select", "as_strided", "_reshape_alias", "lift_fresh", "device", "promote_types"}
_FUSED = {
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
}
_FUSED_BACKWARD = {name + "_backward" for name in _FUSED}
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: List[Op] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in _VIEWS:
            return out
        outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
        if name in _FUSED:  # the kernels differ by name and by their scalar outputs; output and log-sum-exp kept
            name, outs = "fused attention", outs[:2]
        if name in _FUSED_BACKWARD:
            name, outs = "fused attention backward", outs[:3]
        if name in ("cudnn_batch_norm", "cudnn_batch_norm_backward"):
            name, outs = name.replace("cudnn", "native"), outs[:3]
        if name == "empty" and all(o.numel() == 0 for o in outs):
            return out  # the CPU's batch norm reserve placeholder
        self.seen.append((name, tuple((str(o.dtype).replace("torch.", ""), tuple(o.shape)) for o in outs)))
        return out


def _h100_attention(q: Any, k: Any, v: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
                    scale: Any = None, enable_gqa: bool = False) -> Any:  # fmt: skip
    """What an H100 picks, where fake CUDA has no device to ask."""
    if torch.is_autocast_enabled("cuda"):
        q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
    if attn_mask is not None and attn_mask.dtype == torch.bool:  # CUDA's convert_boolean_attn_mask
        zero = torch.scalar_tensor(0.0, dtype=q.dtype, device=q.device)
        minus = torch.scalar_tensor(-math.inf, dtype=q.dtype, device=q.device)
        attn_mask = torch.where(attn_mask, zero, minus)
    if attn_mask is None and q.dtype in (torch.bfloat16, torch.float16):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, attn_mask, q.requires_grad, dropout_p, is_causal, scale=scale
    )[0]


def _on(device: str, built: Any) -> Tuple[Any, Any]:
    """The model with fake parameters and buffers on `device`, and a batch there."""
    model = built.model.train()
    for module in model.modules():
        for key, value in list(module._parameters.items()):
            if value is not None:
                fake = torch.empty(value.shape, dtype=value.dtype, device=device)
                module._parameters[key] = torch.nn.Parameter(fake, value.requires_grad)
        for key, value in list(module._buffers.items()):
            if value is not None:
                module._buffers[key] = torch.zeros(value.shape, dtype=value.dtype, device=device)
    batch = built.make_batch(built.batches[0], False)
    return model, batch.to(device) if isinstance(batch, torch.Tensor) else batch


@contextlib.contextmanager
def _cuda_autocast(amp: bool) -> Any:
    if not amp:
        yield
        return
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        torch.autocast_decrement_nesting()
        torch.set_autocast_enabled("cuda", False)
        torch.clear_autocast_cache()


def step_ops(name: str, side: str, amp: bool) -> List[Op]:
    """The ops of one forward and loss (and backward, on a real GPU and for the trace beside it).

    side: "fake-cuda" (PyTorch's CUDA autocast on fake CUDA tensors, forward only), "real-cuda" (the GPU itself,
    its own attention choice, backward too), "trace" (fake CPU tensors as the estimator runs them), "trace+backward".
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    models.build.cache_clear()  # a fresh, seeded model per side: the fake side swaps the parameters it is given
    built = models.build(name, dry=True)
    if side == "real-cuda":
        model = built.model.to("cuda").train()
        batch = built.make_batch(built.batches[0], False)
        batch = batch.to("cuda") if isinstance(batch, torch.Tensor) else batch
        with _Ops() as ops:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = built.loss(model(batch), batch)
            ops.seen.append(("backward", ()))
            loss.backward()
        return ops.seen
    attention = F.scaled_dot_product_attention
    device = "cuda" if side == "fake-cuda" else "cpu"
    with FakeTensorMode(allow_non_fake_inputs=True):
        model, batch = _on(device, built)
        if device == "cuda":
            F.scaled_dot_product_attention = _h100_attention
            policy: Any = _cuda_autocast(amp)
        else:
            policy = cuda_kernels()
        cpu_autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp and device == "cpu")
        try:
            with policy, _Ops() as ops:
                with cpu_autocast:
                    loss = built.loss(model(batch), batch)
                if side == "trace+backward":
                    ops.seen.append(("backward", ()))
                    loss.backward()
        finally:
            F.scaled_dot_product_attention = attention
    return ops.seen


def _kind(cuda: List[Op], traced: List[Op]) -> str:
    """What a difference is, where it is one of the two known ones; "other" is to be looked at."""
    names = {op for op, _ in cuda} | {op for op, _ in traced}
    if names == {"native_batch_norm"}:
        return "batch-norm statistics: fp32 on CUDA, bf16 traced (per channel)"
    if names == {"fused attention"}:
        return "memory-efficient attention pads its log-sum-exp to a multiple of 32 rows (fp32, per head)"
    return "other"


def _bytes(op: Op) -> int:
    return sum(_BYTES.get(dtype, 4) * math.prod(shape) for dtype, shape in op[1])


def compare(name: str, amp: bool, real: bool = False) -> Dict[str, Any]:
    if real:
        cuda, traced = step_ops(name, "real-cuda", amp), step_ops(name, "trace+backward", amp)
    else:
        cuda, traced = step_ops(name, "fake-cuda", amp), step_ops(name, "trace", amp)
    differences = []
    matcher = difflib.SequenceMatcher(a=cuda, b=traced, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            differences.append(
                {
                    "kind": _kind(cuda[i1:i2], traced[j1:j2]),
                    "cuda": [f"{op} {outs}" for op, outs in cuda[i1:i2]][:3],
                    "trace": [f"{op} {outs}" for op, outs in traced[j1:j2]][:3],
                    "ops": max(i2 - i1, j2 - j1),
                    "bytes": sum(map(_bytes, traced[j1:j2])) - sum(map(_bytes, cuda[i1:i2])),
                }
            )
    total = sum(map(_bytes, cuda))
    return {
        "arch": name,
        "amp": "bf16" if amp else None,
        "ops_cuda": len(cuda),
        "ops_trace": len(traced),
        "same_ops": sum(block.size for block in matcher.get_matching_blocks()),
        "output_bytes_cuda": total,
        "output_bytes_trace": sum(map(_bytes, traced)),
        "differences": differences,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archs", nargs="*", help="architectures (default: all of benchmarks/gpu/models.py)")
    parser.add_argument("--real", action="store_true", help="on an NVIDIA GPU: its own ops, backward included")
    parser.add_argument("--out", type=Path, default=None, help="folder for the result (default benchmarks/results)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if args.real and not torch.cuda.is_available():
        sys.exit("autocast_parity --real needs an NVIDIA GPU and a CUDA build of torch")
    warnings.filterwarnings("ignore")
    rows, skipped = [], {}
    for name in args.archs or list(models.ARCHS):
        for amp in (False, True):
            try:
                row = compare(name, amp, real=args.real)
            except models.Unavailable as exc:
                skipped[name] = str(exc)
                break
            except RuntimeError as exc:  # cuDNN's RNN asks for the driver even on fake tensors
                if args.real:
                    raise
                skipped[name] = f"needs a CUDA driver ({type(exc).__name__}: {str(exc).splitlines()[0]})"
                break
            rows.append(row)
            print(
                f"{name:16} {row['amp'] or 'fp32':5} ops {row['same_ops']}/{row['ops_cuda']} the same, "
                f"{len(row['differences'])} differences, {row['output_bytes_trace'] - row['output_bytes_cuda']:+d} B"
            )
            for difference in row["differences"]:
                if difference["kind"] == "other":
                    print(f"    other: CUDA {difference['cuda']} trace {difference['trace']}")
    for name, why in skipped.items():
        print(f"{name}: not compared: {why}")
    if args.no_write:
        return
    if args.real:
        description = (
            "one training step (forward, loss, backward) per GPU-suite architecture (dry-run sizes) on the GPU under "
            "torch.autocast('cuda') vs the trace's fake CPU tensors under CPU autocast and cuda_kernels(); aten ops "
            "that make tensors, with their outputs' dtypes and shapes"
        )
        assumed = ["cudnn_batch_norm compared as native_batch_norm; attention kernels compared by their outputs"]
    else:
        description = (
            "one training-mode forward and loss per GPU-suite architecture (dry-run sizes), fake CUDA tensors under "
            "PyTorch's CUDA autocast vs the trace's fake CPU tensors under CPU autocast and cuda_kernels(); aten "
            "ops that make tensors, with their outputs' dtypes and shapes"
        )
        assumed = [
            "scaled_dot_product_attention runs flash attention for bf16/fp16 without a mask, memory-efficient "
            "attention otherwise",
            "cudnn_batch_norm compared as native_batch_norm (the same tensors; its reserve is empty)",
        ]
    flags = " --real" if args.real else ""
    data = {
        # run with another venv's python (a CUDA build): recorded as it is typed
        "command": f"PYTHONPATH=. {sys.executable} benchmarks/autocast_parity.py{flags}",
        "description": description,
        "assumed": assumed,
        "rows": rows,
        "skipped": skipped,
    }
    write_result("gpu_autocast_parity" if args.real else "autocast_parity", data, args.out)


if __name__ == "__main__":
    main()
