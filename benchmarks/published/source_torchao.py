"""torchao's low-bit optimizers, their first benchmark table: timm's ViT-H fine-tuned on resisc45 with BF16 AMP at
batch 8 on an RTX 4070 Ti SUPER, `torch.cuda.max_memory_allocated() / 1e9` printed after training.

Source of every figure and setting below: torchao/prototype/low_bit_optim/README.md of pytorch/ao at commit
56d46a2869d5342568e3d746d4b907966e0341ce ("Update low-bit Adam benchmark", July 2024), with the script it names,
benchmarks/benchmark_low_bit_adam.py at the same commit: `timm.create_model(args.model, pretrained=True,
num_classes=45).cuda()` (not compiled: `--compile` is off by default and the table does not say it), each step
`F.cross_entropy(model(images), labels)` under `torch.autocast("cuda", dtype=torch.bfloat16)`, backward, the
optimizer's step, `optim.zero_grad()` (set_to_none); images RandomResizedCrop(224), so every batch is
(8, 3, 224, 224). The optimizers of that script's OPTIM_MAP: "PyTorch" is torch.optim.Adam (foreach, the CUDA
default), "bnb 8-bit" bitsandbytes.optim.Adam8bit, "ao 8-bit" / "ao 4-bit" torchao's Adam8bit (block 2048) and
Adam4bit (block 128), weight_decay 0. The evaluation after each epoch runs at the same batch under no_grad, below
the training step's peak. The stack of that date: torch 2.3 (the README asks for >= 2.3), bitsandbytes 0.43.1
(blocksize 2048, parameters under 4096 elements in 32 bits: analysis/trace/modelled_optimizers.py)."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks.published.runner import relative_error

COMMIT = "56d46a2869d5342568e3d746d4b907966e0341ce"
SOURCE: Dict[str, str] = {
    "name": "torchao, low-bit optimizers: ViT-H fine-tune (July 2024)",
    "url": "https://github.com/pytorch/ao/tree/main/torchao/optim",
    "text": f"https://github.com/pytorch/ao/blob/{COMMIT}/torchao/prototype/low_bit_optim/README.md",
    "gpu": "RTX 4070 Ti SUPER 16 GB",
    "stack": "torch 2.3, timm (vit_huge_patch14_224), bitsandbytes 0.43.1, torchao prototype low_bit_optim",
    "measure": "torch.cuda.max_memory_allocated() / 1e9 (GB), whole run",
    "open": "the torch and bitsandbytes releases (the README's date: torch 2.3, bitsandbytes 0.43.1); whether the "
    "model was compiled (the script's default, off); the weights (pretrained ViT-H: same shapes as built here)",
}
TARGET = 0.03
GPU = "RTX 4070 Ti Super"
TORCH = "2.3"
CUDA = "12.1"  # torch 2.3's default wheel
MODEL = "vit_huge_patch14_224"  # timm's constructor of vit_huge_patch14_224.orig_in21k (630M parameters)
CLASSES = 45  # resisc45
BATCH = 8
IMAGE = (3, 224, 224)
LR = 1e-4  # the script's --lr default
# what the rows cannot express, said once for the README
NOT_EXPRESSED = (
    "lpmm 4-bit and lpmm 4-bit (rank-1): the low-bit-optimizers package's state layout is not modelled; "
    "ao FP8 E4M3 is not in this table's version of the README"
)


def model() -> Any:
    """ViT-H as timm builds it (no weights: pretrained=False builds the same shapes), with the 45-class head."""
    from benchmarks.zoo.packages import prepare

    prepare()
    import timm
    import torch

    with torch.device("meta"):
        return timm.create_model(MODEL, pretrained=False, num_classes=CLASSES).train()


def make_batch(batch_size: int) -> Tuple[Any, Any]:
    import torch

    return torch.randn(batch_size, *IMAGE), torch.randint(0, CLASSES, (batch_size,))


def step(net: Any, opt: Any, batch: Any) -> None:
    """The script's loop body (GradScaler disabled for bf16: its scale and step are the plain ones)."""
    import torch
    import torch.nn.functional as F

    images, labels = batch
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(net(images.cuda()), labels.cuda())
    loss.backward()
    opt.step()
    opt.zero_grad()


def ao_adam(params: Sequence[Any], bits: int) -> Any:
    """torchao's prototype Adam8bit / Adam4bit at that commit, as the state it allocates (adam.py `_Adam.step`,
    subclass_8bit.py / subclass_4bit.py `zeros` and `maybe_new_*_zero_buffer`): per parameter a step scalar and
    two buffers; a parameter of at least 4096 elements divisible by the block is quantised (codes uint8, one per
    element in 8 bits, one per two in 4 bits; fp32 scales, one per block; the 256- or 16-value fp32 map), any
    other one keeps fp32 zeros of its size. The update is one compiled kernel per parameter, in place."""
    import torch

    block, values = (2048, 256) if bits == 8 else (128, 16)

    def buffer(p: Any, name: str) -> Dict[str, Any]:
        n = p.numel()
        if n >= 4096 and n % block == 0:
            return {
                f"{name}.codes": torch.zeros(n * bits // 8, dtype=torch.uint8, device=p.device),
                f"{name}.scale": torch.zeros(n // block, device=p.device),
                f"{name}.qmap": torch.zeros(values, device=p.device),
            }
        return {name: torch.zeros(n, device=p.device)}

    class AoAdamStandIn(torch.optim.Optimizer):
        def __init__(self, params: Any, lr: float = LR) -> None:  # the trace re-creates it from its defaults
            super().__init__(params, {"lr": lr})

        @torch.no_grad()
        def step(self, closure: Any = None) -> Any:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["step"] = torch.tensor(0.0, device=p.device)
                        state.update(buffer(p, "exp_avg"))
                        state.update(buffer(p, "exp_avg_sq"))
                    state["step"] += 1
            return None

    AoAdamStandIn.__name__ = f"Adam{bits}bit"
    return AoAdamStandIn(list(params))


def optimizer(kind: str, params: Sequence[Any]) -> Any:
    import torch

    from gpumem_kernel.analysis import BnbSettings, planned_bitsandbytes

    if kind == "Adam":
        return torch.optim.Adam(params, lr=LR, weight_decay=0)
    if kind == "bnb Adam8bit":  # bitsandbytes 0.43.1: blocksize 2048, under 4096 elements in 32 bits
        return planned_bitsandbytes(params, BnbSettings(states=2, blocksize=2048, fp32_below=4096), "Adam8bit", LR, 0)
    if kind == "ao Adam8bit":
        return ao_adam(params, 8)
    if kind == "ao Adam4bit":
        return ao_adam(params, 4)
    raise ValueError(f"unknown optimizer {kind!r}")


# (row as the README names it, published GB, optimizer, rule applied, note)
ROWS: Tuple[Tuple[str, float, str, str], ...] = (
    ("PyTorch", 12.94, "Adam", "torch.optim.Adam, foreach"),
    ("bnb 8-bit", 8.31, "bnb Adam8bit", "bitsandbytes 0.43.1"),
    ("ao 8-bit", 8.32, "ao Adam8bit", "torchao Adam8bit state, block 2048"),
    ("ao 4-bit", 7.72, "ao Adam4bit", "torchao Adam4bit state, block 128"),
)


def _row(name: str, published: float, kind: str, rule: str, net: Any, trace: Callable[..., Any]) -> Dict[str, Any]:
    started = time.perf_counter()
    report = trace(step, net, optimizer(kind, list(net.parameters())), batch_size=BATCH, input=make_batch)
    predicted = int(report.peak_allocated_bytes) / 1e9
    return {
        "name": name,
        "settings": {"model": MODEL, "classes": CLASSES, "batch": BATCH, "amp": "bf16", "optimizer": kind},
        "unit": "GB",
        "published": published,
        "predicted": round(predicted, 3),
        "error": relative_error(predicted, published),
        "seconds": round(time.perf_counter() - started, 1),
        "note": "",
        "rule": rule,
    }


def run(names: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    from gpumem_kernel.analysis import trace_step

    def trace(*args: Any, **options: Any) -> Any:
        return trace_step(*args, target=GPU, torch_version=TORCH, cuda_version=CUDA, **options)

    net = model()
    out = []
    for name, published, kind, rule in ROWS:
        if names and name not in names:
            continue
        out.append(_row(name, published, kind, rule, net, trace))
        r = out[-1]
        print(f"torchao {name:<10} published {published:>6} GB | predicted {r['predicted']:>7} ({r['error']:+.1%})")
    return out
