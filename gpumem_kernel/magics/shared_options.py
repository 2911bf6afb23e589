"""The one table of `analyze`'s options: `%gpumem analyze|recommend` (magics.options, IPython's magic_arguments)
and `python -m gpumem_kernel analyze` (gpumem_kernel.cli, argparse) are both generated from it, and each option
names the AnalysisRequest field it fills. Adding an option is one row here and its use in the analysis."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from gpumem_kernel.analysis import ADVICE_SECONDS
from gpumem_kernel.analysis import OPTIMIZERS
from gpumem_kernel.analysis import LORA_HELP
from gpumem_kernel.analysis import PEFT_HELP
from gpumem_kernel.analysis import QUANTIZE_HELP
from gpumem_kernel.analysis import BNB_HELP
from gpumem_kernel.magics import argcheck
from gpumem_kernel.magics.argcheck import CPU, CUDA, INDEX

MAGIC = "magic"  # `%gpumem analyze|recommend`
CLI = "cli"  # `python -m gpumem_kernel analyze`
BOTH = (MAGIC, CLI)


@dataclass(frozen=True)
class Option:
    flags: Tuple[str, ...]
    settings: Dict[str, Any] = field(default_factory=dict)  # add_argument's keywords, as the magic has them
    request: Optional[str] = None  # the AnalysisRequest field it fills; None: how the command runs or shows
    surfaces: Tuple[str, ...] = BOTH
    cli: Dict[str, Any] = field(default_factory=dict)  # the terminal's keywords over `settings` (shorter help)
    cli_flags: Optional[Tuple[str, ...]] = None  # the terminal's spelling when it differs (MODEL is --model there)

    def keywords(self, surface: str) -> Dict[str, Any]:
        merged = {**self.settings, **self.cli} if surface == CLI else dict(self.settings)
        return {key: value for key, value in merged.items() if value is not None}

    def flags_for(self, surface: str) -> Tuple[str, ...]:
        return self.cli_flags if surface == CLI and self.cli_flags is not None else self.flags

    @property
    def dest(self) -> str:
        return self.flags[-1].lstrip("-").replace("-", "_")

    def add_to(self, parser: Any, surface: str = CLI) -> None:
        parser.add_argument(*self.flags_for(surface), **self.keywords(surface))


def memory_size(text: str) -> str:
    """--memory's SIZE, checked as the line is read (one line: "must be positive"), and kept as written."""
    from gpumem_kernel.analysis import parse_memory  # the GPU table loads only for a command that needs it

    try:
        parse_memory(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


_TASKS = ("causal-lm", "seq-cls", "token-cls", "masked-lm", "seq2seq-lm", "image-cls", "base")
_ROUND_TAIL = 'default: the JupyterLab setting "Batch-size rounding", else pow2'

OPTIONS: Tuple[Option, ...] = (
    Option(
        ("model",),
        dict(
            metavar="MODEL",
            help="name of a torch.nn.Module in this kernel (model, trainer.model), or a model by name built on the "
            "meta device from its config: hf:ORG/NAME[@REVISION], a config.json or a model directory (needs "
            "transformers)",
        ),
        cli_flags=("--model",),
        cli=dict(
            required=True,
            metavar="MODULE:FACTORY|hf:ORG/NAME",
            help="importable factory (or class, or module instance) of the model, or a model by name built on the "
            "meta device from its config: hf:ORG/NAME[@REVISION], a config.json or a model directory (needs "
            "transformers)",
        ),
    ),
    Option(
        ("--task",),
        dict(
            choices=_TASKS, help="with a model by name: its head (default causal-lm); the batch carries labels for it"
        ),
        cli=dict(help="with a model by name: its head (default causal-lm)"),
    ),
    Option(
        ("--trust-remote-code",),
        dict(
            action="store_true",
            help="with a model by name: run the model code its repository ships (auto_map); off by default",
        ),
        cli=dict(help="with a model by name: run its repository's model code"),
    ),
    Option(
        ("-b", "--batch"),
        dict(type=argcheck.count, default=32, metavar="N", help="the batch size to analyse (default 32)"),
        request="batch_size",
        cli=dict(metavar=None),
    ),
    Option(
        ("--input",),
        dict(
            metavar="SHAPE|VAR|FUNC",
            help="one sample's shape without the batch (3x224x224; 512 tokens for a model starting with an "
            "Embedding), a variable holding a sample batch (tensor, tuple or dict of tensors), or a "
            "variable holding a function batch_size -> batch (default: from a first Linear layer)",
        ),
        request="input",
        cli=dict(
            metavar="SHAPE",
            help="one sample's shape without the batch: 3x224x224, or 512 tokens for a model starting with an "
            "Embedding (default: from a first Linear layer)",
        ),
    ),
    Option(
        ("--vocab",),
        dict(
            type=argcheck.count,
            metavar="N",
            help="with a token shape: token ids below N (default: the first Embedding's size)",
        ),
        request="vocab_size",
        cli=dict(metavar=None, help="with a token shape: token ids below N"),
    ),
    Option(
        ("--loss",),
        dict(metavar="VAR", help="a function (output, batch) -> scalar loss (default: mean of squares of the output)"),
        request="loss",
        surfaces=(MAGIC,),
    ),
    Option(
        ("--classes",),
        dict(type=argcheck.count, help="cross-entropy over this many classes (default: mean of squares of the output)"),
        request="loss",
        surfaces=(CLI,),
    ),
    Option(
        ("--optimizer",),
        dict(
            default="adamw",
            metavar="KIND|VAR",
            help="adamw (default), adam, sgd, sgd-momentum, adam8bit, adamw8bit, paged-adamw8bit, paged-adamw "
            "(bitsandbytes' state, modelled without it), adafactor (these names first), or your optimizer variable "
            "(its class, settings and state are used)",
        ),
        request="optimizer",
        cli=dict(choices=OPTIMIZERS, metavar=None, help=None),
    ),
    Option(
        ("--step",),
        dict(
            metavar="FUNC",
            help="your own training step, a function (model, optimizer, batch) traced on copies instead of the "
            "built-in one; --optimizer may then name a tuple, list or dict of your optimizers",
        ),
        request="step",
        surfaces=(MAGIC,),
    ),
    Option(
        ("--keep-grads",),
        dict(
            action="store_true",
            help="zero_grad(set_to_none=False): gradients stay allocated between steps (the default before torch 2.0)",
        ),
        request="keep_grads",
        surfaces=(MAGIC,),
    ),
    Option(
        ("--expandable-segments",),
        dict(
            action="store_true",
            help="trace the caching allocator with expandable segments, as "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True runs it (default: as the environment says)",
        ),
        request="expandable_segments",
    ),
    Option(("--lora",), dict(metavar="r=N[,targets=..]", help=LORA_HELP), request="lora"),
    Option(("--peft",), dict(metavar="FILE|JSON", help=PEFT_HELP), request="peft"),
    Option(("--quantize",), dict(metavar="nf4|fp4|int8", help=QUANTIZE_HELP), request="quantize"),
    Option(("--bnb",), dict(metavar="VERSION", help=BNB_HELP), request="bnb_version"),
    Option(
        ("--torch",),
        dict(
            metavar="VERSION",
            help="plan for this torch, e.g. 1.10: its memory rules (softmax's saved input before 1.11, ...), "
            "workspaces and context (default: this kernel's torch)",
        ),
        request="torch_version",
        cli=dict(help="plan for this torch, e.g. 1.10 (its memory rules)"),
    ),
    Option(
        ("--cuda",),
        dict(
            metavar="VERSION",
            help="plan the CUDA context of a --target or --memory GPU for this CUDA runtime, e.g. 11.2 (eager "
            "loading before 11.7): the build of --torch, or of this kernel's torch without it (a context measured "
            "on this machine's GPU is not planned: it is what it is)",
        ),
        request="cuda_version",
        cli=dict(
            help="plan the CUDA context of a --target or --memory GPU for this CUDA runtime, e.g. 11.2: the build of "
            "--torch, or of this torch without it",
        ),
    ),
    Option(
        ("--size-hint",),
        dict(
            type=float,
            metavar="F",
            help="sizes that depend on tensor values (nonzero, boolean masks, unique): the fraction selected or "
            "distinct, e.g. 0.1 (default 1: every element, an upper bound)",
        ),
        request="size_hints",
        surfaces=(MAGIC,),
    ),
    Option(
        ("--amp",),
        dict(default="off", choices=("off", "fp16", "bf16"), help="autocast mode (default off)"),
        request="amp",
        cli=dict(help=None),
    ),
    Option(
        ("--accum",),
        dict(type=int, default=1, metavar="N", help="gradient accumulation steps (default 1)"),
        request="grad_accum",
        cli=dict(metavar=None, help="gradient accumulation steps"),
    ),
    Option(
        ("--checkpointing",),
        dict(action="store_true", help="gradient checkpointing of the model's blocks"),
        request="checkpointing",
    ),
    Option(
        ("--device",),
        dict(
            metavar="D",
            type=argcheck.device(CPU, CUDA, INDEX),
            help="cpu, cuda, cuda:N or N: measure on this GPU (default: the GPU CUDA already uses, else traced)",
        ),
        request="device",
        cli=dict(metavar=None, help="cuda, cuda:N or N: measure on this GPU; cpu: traced (default: traced)"),
    ),
    Option(
        ("--target",),
        dict(metavar="GPU", help='plan for this GPU, e.g. "RTX 4080 Super", A100-80GB, H100 (traced engine)'),
        request="target",
        cli=dict(help='plan for this GPU, e.g. "RTX 4080 Super", A100-80GB, V100'),
    ),
    Option(
        ("--memory",),
        dict(
            type=memory_size,
            metavar="SIZE",
            help="plan for this much device memory, e.g. 16GiB or 24GB; with --target, that GPU within this memory "
            "(a MIG slice, a share)",
        ),
        request="memory",
        cli=dict(
            help="plan for this much device memory, e.g. 16GiB; with --target, that GPU within this memory (MIG, a "
            "share)"
        ),
    ),
    Option(
        ("--round",),
        dict(
            type=argcheck.rounding,
            metavar="pow2|N|none",
            help="round the recommended and safe picks down to a power of two (pow2), a multiple of N (e.g. 8) or "
            f"only to a whole batch (none); {_ROUND_TAIL}",
        ),
        request="rounding",
        cli=dict(
            help="round the recommended and safe picks down to a power of two (default), a multiple of N (e.g. 8) "
            "or a whole batch"
        ),
    ),
    Option(
        ("--multiple",),
        dict(type=argcheck.count, metavar="N", help="same as --round N"),
        request="multiple",
        cli=dict(metavar=None),
    ),
    Option(
        ("--seq",),
        dict(
            type=argcheck.count,
            metavar="N",
            help="tokens per sample of a token input (a model by name, a token --input, a sample batch of token ids)",
        ),
        request="seq",
    ),
    Option(
        ("--padded",),
        dict(
            action="store_true",
            help="the token batch padded as fine-tuning pads it: an attention_mask with padding, labels -100 there "
            "(transformers then builds a 4-D mask and expands grouped-query K/V)",
        ),
        request="padded",
        cli=dict(help="the token batch with an attention_mask that has padding (and labels -100 there)"),
    ),
    Option(
        ("--search",),
        dict(
            choices=("batch", "seq"),
            default="batch",
            help="batch (default): the batch picks; seq: also the longest sequence that fits at each of "
            "--seq-batches, with recommended and safe lengths",
        ),
        request="search",
    ),
    Option(
        ("--seq-batches",),
        dict(metavar="N,N", help="with --search seq: the batches to search the sequence length at (default 1,4,8)"),
        request="seq_batches",
    ),
    Option(
        ("--seq-multiple",),
        dict(
            type=argcheck.count,
            metavar="N",
            help='with --search seq: lengths in multiples of N tokens; default: the JupyterLab setting "Sequence-'
            'length multiple", else 64',
        ),
        request="seq_multiple",
    ),
    Option(
        ("--effective-batch",),
        dict(type=argcheck.count, metavar="N", help="target effective batch: accumulation steps per pick"),
        request="effective_batch",
        cli=dict(metavar=None),
    ),
    Option(
        ("--eval-batch",),
        dict(
            type=argcheck.count,
            metavar="N",
            help="also the evaluation step at batch N (model.eval(), no gradients) and the largest evaluation batch",
        ),
        request="eval_batch",
    ),
    Option(
        ("--world-size",),
        dict(type=int, default=1, metavar="N", help="ranks of data-parallel training"),
        request="world_size",
        cli=dict(metavar=None, help=None),
    ),
    Option(
        ("--strategy",),
        dict(
            choices=("ddp", "fsdp", "zero1", "zero2", "zero3"),
            help="how model states are sharded over --world-size ranks (rank 0 traced under PyTorch's wrappers)",
        ),
        request="strategy",
        cli=dict(help=None),
    ),
    Option(
        ("--json",),
        dict(action="store_true", help="print the raw payload as JSON instead of the report"),
        surfaces=(MAGIC,),
    ),
    Option(
        ("--format",),
        dict(default="text", choices=("text", "json"), help="text: the analysis block; json: the payload"),
        surfaces=(CLI,),
    ),
)

TIMELINE_OPTIONS: Tuple[Option, ...] = (  # `analyze` only, not `recommend`
    Option(
        ("--timeline",),
        dict(
            action="store_true",
            help="also show the predicted memory timeline of the step: what is alive when, and which line of your "
            "code allocated it (from the trace, also when a GPU measures the analysis)",
        ),
        cli=dict(
            help="also the predicted memory timeline of the step (text: its peak and what is alive there, by line)"
        ),
    ),
    Option(
        ("--save",),
        dict(
            metavar="FILE",
            help="with --timeline: write its full history, FILE.pickle (PyTorch's memory snapshot, for "
            "pytorch.org/memory_viz) or FILE.csv (one row per allocation)",
        ),
    ),
    Option(
        ("--advise",),
        dict(
            action="store_true",
            help="also what makes it fit (a step that will not fit gets it unasked where that takes at most about "
            f"{ADVICE_SECONDS:.0f} s, else says how to ask): the step again with "
            "each lever set (AMP, checkpointing, a smaller micro-batch with accumulation, a paged or 8-bit optimizer, "
            "Adafactor, LoRA, QLoRA, a shorter sequence, FSDP), each traced as an analysis of its own, and the "
            "smallest GPU that holds it; ordered by cost, the cheapest that fits recommended",
        ),
    ),
    # generate()'s memory instead of a training step (analysis.plan_generation): the magic's `analyze` only
    Option(
        ("--generate",),
        dict(
            action="store_true",
            help="plan model.generate() instead of a training step: the prefill of --prompt tokens, the KV cache and "
            "the last of --new decode steps; with --target/--memory the longest context and largest batch that fit",
        ),
        surfaces=(MAGIC,),
    ),
    Option(
        ("--prompt",),
        dict(type=argcheck.count, metavar="N", help="with --generate: prompt tokens per sequence"),
        surfaces=(MAGIC,),
    ),
    Option(
        ("--new",),
        dict(type=argcheck.count, metavar="M", help="with --generate: new tokens generated (max_new_tokens)"),
        surfaces=(MAGIC,),
    ),
    Option(
        ("--cache",),
        dict(
            choices=("dynamic", "static"),
            default="dynamic",
            help="with --generate: DynamicCache (default, grows each step) or StaticCache (prompt + new allocated up "
            "front)",
        ),
        surfaces=(MAGIC,),
    ),
)


def options_of(surface: str, timeline: bool = True) -> Tuple[Option, ...]:
    table = OPTIONS + (TIMELINE_OPTIONS if timeline else ())
    return tuple(option for option in table if surface in option.surfaces)


def add_options(parser: argparse.ArgumentParser, surface: str = CLI) -> None:
    """Every option of `surface` added to an argparse parser."""
    for option in options_of(surface):
        option.add_to(parser, surface)


def request_fields(args: Any, surface: str) -> Dict[str, Any]:
    """{AnalysisRequest field: the parsed value} of every option of `surface` that fills one, as the line wrote it;
    the command then resolves the few that name the user's objects (a variable, a loss)."""
    values: Mapping[str, Any] = vars(args)
    return {
        option.request: values[option.dest]
        for option in options_of(surface)
        if option.request is not None and option.dest in values
    }
