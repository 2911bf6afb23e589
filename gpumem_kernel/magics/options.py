"""The magic_arguments of `%gpumem analyze|recommend|autobatch|benchmark`: each command's options, their
--help text and examples."""

from __future__ import annotations

from typing import Any, Callable, List

from IPython.core.magic_arguments import argument, kwds, magic_arguments

from gpumem_kernel.analysis.lora import LORA_HELP
from gpumem_kernel.analysis.quantize import QUANTIZE_HELP
from gpumem_kernel.magics import argcheck
from gpumem_kernel.magics.argcheck import CPU, CUDA, INDEX
from gpumem_kernel.magics.shared_options import SEQUENCE_OPTIONS, memory_size


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

_ANALYSIS_ARGUMENTS = [
    argument(
        "model",
        metavar="MODEL",
        help="name of a torch.nn.Module in this kernel (model, trainer.model), or a model by name built on the meta "
        "device from its config: hf:ORG/NAME[@REVISION], a config.json or a model directory (needs transformers)",
    ),
    argument(
        "--task",
        choices=("causal-lm", "seq-cls", "token-cls", "masked-lm", "seq2seq-lm", "image-cls", "base"),
        help="with a model by name: its head (default causal-lm); the batch carries labels for it",
    ),
    argument(
        "--trust-remote-code",
        action="store_true",
        help="with a model by name: run the model code its repository ships (auto_map); off by default",
    ),
    argument(
        "-b", "--batch", type=argcheck.count, default=32, metavar="N", help="the batch size to analyse (default 32)"
    ),
    argument(
        "--input",
        metavar="SHAPE|VAR|FUNC",
        help="one sample's shape without the batch (3x224x224; 512 tokens for a model starting with an "
        "Embedding), a variable holding a sample batch (tensor, tuple or dict of tensors), or a "
        "variable holding a function batch_size -> batch (default: from a first Linear layer)",
    ),
    argument(
        "--vocab",
        type=argcheck.count,
        metavar="N",
        help="with a token shape: token ids below N (default: the first Embedding's size)",
    ),
    argument(
        "--loss",
        metavar="VAR",
        help="a function (output, batch) -> scalar loss (default: mean of squares of the output)",
    ),
    argument(
        "--optimizer",
        default="adamw",
        metavar="KIND|VAR",
        help="adamw (default), adam, sgd, sgd-momentum, adam8bit, adamw8bit, paged-adamw8bit, paged-adamw "
        "(bitsandbytes' state, modelled without it), adafactor (these names first), or your optimizer variable "
        "(its class, settings and state are used)",
    ),
    argument(
        "--step",
        metavar="FUNC",
        help="your own training step, a function (model, optimizer, batch) traced on copies instead of the built-in "
        "one; --optimizer may then name a tuple, list or dict of your optimizers",
    ),
    argument(
        "--keep-grads",
        action="store_true",
        help="zero_grad(set_to_none=False): gradients stay allocated between steps (the default before torch 2.0)",
    ),
    argument("--lora", metavar="r=N[,targets=..]", help=LORA_HELP),
    argument("--quantize", metavar="nf4|fp4|int8", help=QUANTIZE_HELP),
    argument(
        "--torch",
        metavar="VERSION",
        help="plan for this torch, e.g. 1.10: its memory rules (softmax's saved input before 1.11, ...), "
        "workspaces and context (default: this kernel's torch)",
    ),
    argument(
        "--cuda",
        metavar="VERSION",
        help="plan the CUDA context of a --target or --memory GPU for this CUDA runtime, e.g. 11.2 (eager loading "
        "before 11.7): the build of --torch, or of this kernel's torch without it (a context measured on this "
        "machine's GPU is not planned: it is what it is)",
    ),
    argument(
        "--size-hint",
        type=float,
        metavar="F",
        help="sizes that depend on tensor values (nonzero, boolean masks, unique): the fraction selected or distinct, "
        "e.g. 0.1 (default 1: every element, an upper bound)",
    ),
    argument("--amp", default="off", choices=("off", "fp16", "bf16"), help="autocast mode (default off)"),
    argument("--accum", type=int, default=1, metavar="N", help="gradient accumulation steps (default 1)"),
    argument("--checkpointing", action="store_true", help="gradient checkpointing of the model's blocks"),
    argument(
        "--device",
        metavar="D",
        type=argcheck.device(CPU, CUDA, INDEX),
        help="cpu, cuda, cuda:N or N: measure on this GPU (default: the GPU CUDA already uses, else traced)",
    ),
    argument(
        "--target", metavar="GPU", help='plan for this GPU, e.g. "RTX 4080 Super", A100-80GB, H100 (traced engine)'
    ),
    argument(
        "--memory",
        type=memory_size,
        metavar="SIZE",
        help="plan for this much device memory, e.g. 16GiB or 24GB; with --target, that GPU within this memory "
        "(a MIG slice, a share)",
    ),
    argument(
        "--round",
        type=argcheck.rounding,
        metavar="pow2|N|none",
        help="round the recommended and safe picks down to a power of two (pow2), a multiple of N (e.g. 8) or "
        'only to a whole batch (none); default: the JupyterLab setting "Batch-size rounding", else pow2',
    ),
    argument("--multiple", type=argcheck.count, metavar="N", help="same as --round N"),
    *[argument(*option.flags, **option.settings) for option in SEQUENCE_OPTIONS],
    argument(
        "--effective-batch",
        type=argcheck.count,
        metavar="N",
        help="target effective batch: accumulation steps per pick",
    ),
    argument(
        "--eval-batch",
        type=argcheck.count,
        metavar="N",
        help="also the evaluation step at batch N (model.eval(), no gradients) and the largest evaluation batch",
    ),
    argument("--world-size", type=int, default=1, metavar="N", help="ranks of data-parallel training"),
    argument(
        "--strategy",
        choices=("ddp", "fsdp", "zero1", "zero2", "zero3"),
        help="how model states are sharded over --world-size ranks",
    ),
    argument("--json", action="store_true", help="print the raw payload as JSON instead of the report"),
]


def _with(arguments: List[Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def apply(function: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(arguments):
            function = decorator(function)
        return function

    return apply


_TIMELINE_ARGUMENTS = [
    argument(
        "--timeline",
        action="store_true",
        help="also show the predicted memory timeline of the step: what is alive when, and which line of your "
        "code allocated it (from the trace, also when a GPU measures the analysis)",
    ),
    argument(
        "--save",
        metavar="FILE",
        help="with --timeline: write its full history, FILE.pickle (PyTorch's memory snapshot, for "
        "pytorch.org/memory_viz) or FILE.csv (one row per allocation)",
    ),
]


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
