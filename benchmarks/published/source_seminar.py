"""Efficient Deep Learning Systems (YSDA course), week 2 seminar: a 3-layer MLP trained in full, half and mixed
precision on a CUDA GPU, `torch.cuda.max_memory_allocated()` printed after each run.

Source of every figure and setting below: week02_fast_pipelines/seminar/practice.ipynb of mryab/efficient-dl-systems
(commit e632aa89ca9e6638d52e1b686095e7442faffbb0, outputs of January 2026), with its requirements.txt (torch 2.3.0,
CUDA 12). The notebook's cells, in order: 50 batches of (512, 6144) inputs and targets made once on the GPU;
`create_model(6144, 6144, 3)` (Linear, ReLU, Linear, ReLU, Linear); SGD(lr=0.001), 3 epochs over the 50 batches,
`opt.zero_grad()` (set_to_none, torch 2.x) after each step; `start_timer()` runs gc.collect, empty_cache and
reset_peak_memory_stats before each run; "Max memory used by tensors = {max_memory_allocated() // 1_000_000}
megabytes". The GPU is not named: the comparison plans for the A100 and the H100 (cuBLAS's workspace differs).

Each run's cell rebinds `net` and `opt` before the timer, but its `output` and `loss` still hold the previous run's
autograd graph, whose AccumulateGrad nodes hold that run's parameters: they stay allocated until the first
iteration rebinds `output` and `loss`. The traced step keeps a copy of them (and the old output) alive through its
forward and loss, as the notebook does; the first run follows cells with no CUDA graph alive."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

URL = (
    "https://github.com/mryab/efficient-dl-systems/blob/e632aa89ca9e6638d52e1b686095e7442faffbb0/"
    "week02_fast_pipelines/seminar/practice.ipynb"
)
TORCH = "2.3"  # requirements.txt: torch==2.3.0
CUDA = "12.1"  # torch 2.3.0's default wheel (and nvidia-dali-cuda120 beside it)
GPUS = ("A100 80GB", "H100 80GB")
BATCH = 512
WIDTH = 4096 + 2048
LAYERS = 3
BATCHES = 50  # data and targets, made once, resident through every run


@dataclass(frozen=True)
class Row:
    name: str
    published_mb: int  # max_memory_allocated() // 1_000_000
    precision: str  # full | half | mixed | scaled (mixed with a GradScaler)
    previous: Optional[str]  # the dtype of the previous run's parameters its `loss` keeps alive; None: none
    previous_output: Optional[str] = None  # the dtype of the previous run's `output`

    def settings(self) -> dict:
        return {
            "batch": BATCH,
            "model": f"MLP {LAYERS} x Linear({WIDTH}, {WIDTH})",
            "optimizer": "SGD",
            "precision": self.precision,
            "resident_batches": BATCHES,
            "previous_run_alive": self.previous and f"parameters {self.previous}, output {self.previous_output}",
        }


ROWS: Tuple[Row, ...] = (
    Row("Full precision", 2271, "full", None),
    Row("Half precision", 2063, "half", "float32", "float32"),
    Row("Mixed precision without scaling", 2327, "mixed", "float16", "float16"),
    Row("Mixed precision with scaling", 2535, "scaled", "float32", "float16"),
)


def resident_bytes() -> int:
    """The data the runs iterate over, all on the GPU: the step's own batch is the trace's input, the others
    (49 inputs and 49 targets, fp32) are resident."""
    return (BATCHES - 1) * 2 * BATCH * WIDTH * 4


def model(precision: str) -> Any:
    import torch

    layers = []
    for _ in range(LAYERS - 1):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(WIDTH, WIDTH))
    net = torch.nn.Sequential(*layers)
    return net.half() if precision == "half" else net


def make_batch(batch_size: int) -> Any:
    import torch

    return torch.randn(batch_size, WIDTH), torch.randn(batch_size, WIDTH)


def step(row: Row) -> Callable[[Any, Any, Any], None]:
    """The cell's loop body, with the previous run's graph alive until `output` and `loss` are rebound."""
    import torch

    mse = torch.nn.MSELoss()
    previous = None if row.previous is None else getattr(torch, row.previous)
    previous_output = getattr(torch, row.previous_output or "float32")

    def run(net: Any, opt: Any, batch: Any) -> None:
        x, y = batch
        device = next(net.parameters()).device
        alive = []
        if previous is not None:  # the old parameters and the old `output`, until the rebinds below
            alive = [torch.empty(p.shape, dtype=previous, device=device) for p in net.parameters()]
            alive.append(torch.empty(BATCH, WIDTH, dtype=previous_output, device=device))
        if row.precision == "half":
            loss = mse(net(x.half()), y.half())
        else:
            with torch.autocast("cuda", dtype=torch.float16, enabled=row.precision != "full"):
                loss = mse(net(x), y)
        del alive
        # GradScaler ("scaled"): scaling and unscaling are in place; its scale and found-inf are a few scalars,
        # which the trace leaves out (as analyze's own fp16 step does), and it cannot run on the CPU
        loss.backward()
        opt.step()
        opt.zero_grad()

    return run
