"""The magic_arguments of `%gpumem analyze|recommend|autobatch|benchmark`: each command's options, their
--help text and examples; analyze's and recommend's from the option table of magics.shared_options."""

from __future__ import annotations

from typing import Any, Callable, List

from IPython.core.magic_arguments import argument, kwds, magic_arguments

from gpumem_kernel.magics import argcheck
from gpumem_kernel.magics.argcheck import CPU, CUDA, INDEX
from gpumem_kernel.magics.shared_options import MAGIC, TIMELINE_OPTIONS, options_of


# --- analyze and recommend -----------------------------------------------------------------------------------

_EXAMPLES = """
examples:
  %gpumem analyze model --batch 32 --input 3x224x224
  %gpumem analyze hf:Qwen/Qwen2.5-7B -b 1 --input 2048 --amp bf16 --checkpointing --target H100
  %gpumem analyze model -b 32 --target "RTX 4080 Super" --amp bf16 --optimizer adamw
  %gpumem analyze lm -b 8 --input 512 --vocab 32000 --memory 24GiB --checkpointing
  %gpumem analyze hf:meta-llama/Llama-3.2-1B -b 1 --seq 4096 --amp bf16 --checkpointing --target "RTX 4090" --search seq
  %gpumem analyze model -b 16 --input make_batch --loss my_loss --optimizer opt --device cuda:0
  %gpumem analyze model -b 8 --world-size 4 --strategy zero2 --target H100
  %gpumem analyze hf:meta-llama/Meta-Llama-3-8B -b 1 --input 2048 --quantize nf4 --lora r=16 --memory 24GiB
  %gpumem analyze model -b 32 --input 3x224x224 --memory 16GiB --round 8
  %gpumem analyze model -b 32 --target "RTX 3090" --memory 20GiB
  %gpumem analyze model -b 64 --input make_batch --step train_step --optimizer opt --target "RTX 3090"
  %gpumem analyze model -b 32 --input 3x224x224 --timeline --save step.pickle"""

_ANALYSIS_ARGUMENTS = [argument(*o.flags_for(MAGIC), **o.keywords(MAGIC)) for o in options_of(MAGIC, timeline=False)]
_TIMELINE_ARGUMENTS = [argument(*o.flags_for(MAGIC), **o.keywords(MAGIC)) for o in TIMELINE_OPTIONS]


def _with(arguments: List[Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def apply(function: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(arguments):
            function = decorator(function)
        return function

    return apply


@magic_arguments("gpumem analyze")
@kwds(epilog=_EXAMPLES)
@_with(_ANALYSIS_ARGUMENTS + _TIMELINE_ARGUMENTS)
def analyze_arguments(line: str) -> None:
    """Memory of one training step of MODEL (parameters, gradients, optimizer state, activations, peak) and
    the batch sizes that fit: the maximum (the same for every --batch), recommended (60% of it) and safe (40%),
    rounded down as --round says. Traced on fake tensors without a GPU or for --target/--memory; measured on
    the GPU when CUDA is in use or --device names it."""


@magic_arguments("gpumem recommend")
@_with(_ANALYSIS_ARGUMENTS)
def recommend_arguments(line: str) -> None:
    """Only the batch-size picks of `%gpumem analyze` (same options): maximum, recommended, safe, and the
    status of the current batch."""


# --- autobatch --------------------------------------------------------------------------------------------------


@magic_arguments("gpumem autobatch")
@kwds(
    epilog="""
examples:
  %gpumem autobatch model --input 3x224x224 --amp bf16
  %gpumem autobatch model --input 3x64x64 --simulate 6GiB --margin 0.2 --round 8"""
)
@argument("model", metavar="MODEL", help="name of a torch.nn.Module in this kernel")
@argument(
    "-b", "--batch", type=argcheck.count, metavar="N", help="first batch to try (default: the analysis prediction)"
)
@argument(
    "--input",
    metavar="SHAPE|VAR|FUNC",
    help="as for analyze: a shape, a sample variable or a function batch_size -> batch",
)
@argument("--loss", metavar="VAR", help="a function (output, batch) -> scalar loss")
@argument(
    "--optimizer",
    default="adamw",
    metavar="KIND|VAR",
    help="adamw (default), adam, sgd, sgd-momentum, or your optimizer variable (stepped, then restored)",
)
@argument("--amp", default="off", choices=("off", "fp16", "bf16"), help="autocast mode (default off)")
@argument("--margin", type=float, default=0.10, metavar="F", help="recommended = maximum x (1 - F), default 0.1")
@argument(
    "--round",
    type=argcheck.rounding,
    metavar="pow2|N|none",
    help="round the recommendation down to a power of two (pow2), a multiple of N (e.g. 8) or only to a whole "
    'batch (none); default: the JupyterLab setting "Batch-size rounding", else pow2',
)
@argument("--multiple", type=argcheck.count, metavar="N", help="same as --round N")
@argument("--max", type=argcheck.count, default=2**16, metavar="N", help="largest batch to try (default 65536)")
@argument("--steps", type=int, default=2, metavar="N", help="full training steps per trial (>= 2, default 2)")
@argument(
    "--simulate",
    metavar="SIZE",
    help="no GPU: search on the CPU against this cap on tracked tensor bytes, e.g. 6GiB (labelled simulated)",
)
@argument(
    "--device",
    metavar="D",
    type=argcheck.device(CPU, CUDA, INDEX),
    help="cpu, cuda, cuda:N or N (default: where the model is)",
)
def autobatch_arguments(line: str) -> None:
    """The largest batch that runs full training steps (forward, loss, backward, optimizer step) without
    running out of memory, found with real trials from a clean allocator; a recommended batch a margin
    below it. The model, optimizer and RNG states are restored exactly; Ctrl-C stops with a partial result."""


# --- benchmark --------------------------------------------------------------------------------------------------


@magic_arguments("gpumem benchmark")
@kwds(
    epilog="""
examples:
  %gpumem benchmark model --config configs/checking_gpu_optimization.yaml --dataset train_set
  %gpumem benchmark model --synthetic 3x64x64 --classes 10 --batch-sizes 8,16,32 --num-workers 0,2
  %gpumem benchmark model --synthetic 3x64x64 --classes 10 --simulate 6GiB --steps 3 --save-yaml best.yaml"""
)
@argument("model", metavar="MODEL", help="name of a torch.nn.Module in this kernel")
@argument("--config", metavar="YAML", help="the benchmark guide's config file: its `benchmark:` section")
@argument("--batch-sizes", nargs="+", metavar="N", help="batch sizes, e.g. 8,16,32 (overrides the config)")
@argument("--num-workers", nargs="+", metavar="N", help="DataLoader workers to try, e.g. 0,2 (overrides the config)")
@argument("--steps", type=int, metavar="N", help="measured steps per configuration (overrides the config)")
@argument("--warmup", type=int, metavar="N", help="warm-up steps per configuration (overrides the config)")
@argument(
    "--memory-target", type=float, metavar="F", help="recommended: within this share of the device memory (default 0.8)"
)
@argument("--dataset", metavar="VAR", help="a Dataset variable (map-style or iterable) yielding (inputs, targets)")
@argument("--loader-factory", metavar="VAR", help="a function (batch_size=, num_workers=, pin_memory=) -> DataLoader")
@argument("--synthetic", metavar="SHAPE", help="synthetic samples of this shape, e.g. 3x64x64")
@argument("--classes", type=argcheck.count, metavar="N", help="with --synthetic: class labels 0..N-1 (cross-entropy)")
@argument(
    "--optimizer",
    default="adamw",
    metavar="KIND|VAR",
    help="adamw (default), adam, sgd, sgd-momentum, or your optimizer variable",
)
@argument(
    "--loss",
    metavar="VAR",
    help="a function (output, batch) -> scalar loss (default: cross-entropy or MSE on (inputs, targets))",
)
@argument("--simulate", metavar="SIZE", help="no GPU: CPU run with a cap on tracked tensor bytes, e.g. 6GiB")
@argument(
    "--device",
    metavar="D",
    type=argcheck.device(CPU, CUDA, INDEX),
    help="cpu, cuda, cuda:N or N (default: where the model is)",
)
@argument("--save-yaml", metavar="PATH", help="also write the recommended configuration here (data.*, training.*)")
def benchmark_arguments(line: str) -> None:
    """Sweep batch sizes x DataLoader workers x AMP x pin_memory (the benchmark guide): I/O wait, host-to-device copy,
    forward, backward, optimizer, samples/s, GPU utilisation and peak memory per configuration, then the
    three picks and diagnostics. Rows appear as they finish; Ctrl-C shows the partial table."""
