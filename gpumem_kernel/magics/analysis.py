"""`%gpumem analyze|recommend|autobatch|benchmark`: the analysis engines behind one-line magics.

Each command reads the rest of the line with its magic_arguments parser, turns names into the user's objects
(the model, a sample or batch function, a loss, an optimizer, a Dataset), calls the Python API and displays
its MIME bundle. Every bad argument is one UsageError line (`GPUMEM_DEBUG=1` shows the traceback of a
failing training step instead). The last `recommended` batch of `analyze`/`recommend` is remembered per
kernel (on the shell) for the OOM checklist.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Optional

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, kwds, magic_arguments
from IPython.display import display
from IPython.utils.process import arg_split

from gpumem_kernel.magics import argcheck
from gpumem_kernel.magics.argcheck import CPU, CUDA, INDEX
from gpumem_kernel.probe.torchstats import loaded_torch
from gpumem_kernel.render.text import one_line, shown

_LAST_RECOMMENDATION = "_gpumem_last_recommendation"
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\Z")
OPTIMIZER_CHOICES = ("adamw", "adam", "sgd", "sgd-momentum")
_OPTIMIZER_ALIASES = {"sgdm": "sgd-momentum", "momentum": "sgd-momentum"}
# the Python API's keyword names, as the magic spells them (in the engines' one-line messages)
_OPTION_NAMES = {
    "input": "input",
    "loss": "loss",
    "target": "target",
    "memory": "memory",
    "device": "device",
    "simulate": "simulate",
    "max_batch": "max",
    "start_batch": "batch",
    "margin": "margin",
    "multiple": "multiple",
    "rounding": "round",
    "steps": "steps",
    "dataset": "dataset",
    "loader_factory": "loader-factory",
    "synthetic_shape": "synthetic",
    "num_classes": "classes",
    "vocab_size": "vocab",
}
_KEYWORD = re.compile(r"\b(" + "|".join(_OPTION_NAMES) + r")=(\S?)")


# --- shared helpers ---------------------------------------------------------------------------------------


def split_line(rest: str) -> List[str]:
    """The line's words with shell quoting removed (`--target "RTX 4080 Super"`, `--config 'my cfg.yaml'`).
    IPython's parse_argstring keeps the quotes (non-POSIX split); on Windows backslashes stay as typed."""
    if not sys.platform.startswith("win"):
        return arg_split(rest, posix=True, strict=True)
    words = arg_split(rest, posix=False, strict=True)
    return [w[1:-1] if len(w) >= 2 and w[0] == w[-1] and w[0] in "\"'" else w for w in words]


def parse(spec: Callable[..., Any], command: str, rest: str) -> Any:
    """The parsed line, or one UsageError line naming the command."""
    try:
        return spec.parser.parse_args(split_line(rest))
    except UsageError as error:  # argparse's complaint, e.g. "unrecognized arguments: --bogus"
        raise _fail(command, str(error)) from None
    except ValueError as error:  # unbalanced quotes in the line
        raise _fail(command, str(error)) from None


def _as_option(match: "re.Match[str]") -> str:
    """`device='cuda'` -> `--device 'cuda'`, `input=,` -> `--input,`."""
    option, after = f"--{_OPTION_NAMES[match.group(1)]}", match.group(2)
    return f"{option} {after}" if after and after not in ",;)" else option + after


def _one_line(exc: BaseException) -> str:
    """The first line of an engine's message, its keyword arguments spelled as the magic's options."""
    text = str(exc).strip()
    return _KEYWORD.sub(_as_option, text.splitlines()[0] if text else type(exc).__name__)


def _fail(command: str, message: str) -> UsageError:
    """The one line a bad input gets; echoed values in it are cut (render.text.one_line)."""
    return UsageError(one_line(f"gpumem {command}: {message}"))


def _engine_error(command: str, exc: BaseException) -> UsageError:
    if isinstance(exc, ValueError):
        return _fail(command, _one_line(exc))
    return _fail(
        command,
        f"a training step failed: {type(exc).__name__}: {_one_line(exc)} "
        "(check --input, --loss; GPUMEM_DEBUG=1 shows the traceback)",
    )


def _debug() -> bool:
    return bool(os.environ.get("GPUMEM_DEBUG"))


def lookup(shell: Any, name: str, command: str, what: str) -> Any:
    """`name` or `name.attr.attr` in the user's namespace."""
    if not _NAME.match(name):
        raise _fail(command, f"{what} {shown(name)}: not a variable name")
    head, *attributes = name.split(".")
    if head not in shell.user_ns:
        raise _fail(command, f"{what}: no variable named {head!r} in this kernel")
    value, path = shell.user_ns[head], head
    for attribute in attributes:
        try:
            value = getattr(value, attribute)
        except Exception:
            raise _fail(command, f"{what}: {path} has no attribute {attribute!r}") from None
        path = f"{path}.{attribute}"
    return value


def _module(shell: Any, name: str, command: str) -> Any:
    value = lookup(shell, name, command, "MODEL")
    torch = loaded_torch()
    if torch is None or not isinstance(value, torch.nn.Module):
        raise _fail(command, f"{name} is a {type(value).__name__}, not a torch.nn.Module")
    return value


def _input(shell: Any, text: Optional[str], command: str) -> Any:
    """A shape string (checked here), or the value of a variable: a sample tensor/tuple/dict or a function
    batch_size -> batch."""
    if text is None:
        return None
    if _NAME.match(text):
        head = text.split(".")[0]
        if head not in shell.user_ns:
            raise _fail(
                command,
                f"--input {text!r}: no variable of that name in this kernel, and not a shape such as 3x224x224 or 512",
            )
        return lookup(shell, text, command, "--input")
    from gpumem_kernel.analysis.arguments import parse_shape

    try:
        parse_shape(text)
    except ValueError as exc:
        raise _fail(command, f"--input: {exc}") from None
    return text


def _loss(shell: Any, name: Optional[str], command: str) -> Any:
    if name is None:
        return None
    value = lookup(shell, name, command, "--loss")
    if not callable(value):
        raise _fail(
            command,
            f"--loss {name}: a {type(value).__name__} is not callable; pass a function (output, batch) -> scalar loss",
        )
    return value


def _optimizer(shell: Any, text: str, command: str) -> Any:
    """adamw | adam | sgd | sgd-momentum, or the name of the user's torch.optim.Optimizer."""
    key = text.lower().replace("_", "-")
    key = _OPTIMIZER_ALIASES.get(key, key)
    if key in OPTIMIZER_CHOICES:
        return key
    if _NAME.match(text) and text.split(".")[0] in shell.user_ns:
        value = lookup(shell, text, command, "--optimizer")
        torch = loaded_torch()
        if torch is None or not isinstance(value, torch.optim.Optimizer):
            raise _fail(command, f"--optimizer {text}: a {type(value).__name__}, not a torch.optim.Optimizer")
        return value
    raise _fail(
        command, f"--optimizer {text!r}: use adamw, adam, sgd, sgd-momentum or the name of your optimizer variable"
    )


def _amp(value: Optional[str]) -> Optional[str]:
    return None if value in (None, "off") else value


def _memory(value: Optional[str], option: str, command: str) -> Optional[str]:
    if value is None:
        return None
    from gpumem_kernel.analysis.gpus import parse_memory

    try:
        parse_memory(value)
    except ValueError as exc:
        raise _fail(command, f"{option}: {exc}") from None
    return value


def _target(value: Optional[str], command: str) -> Optional[str]:
    if value is None:
        return None
    from gpumem_kernel.analysis.gpus import lookup as gpu_lookup

    try:
        gpu_lookup(value)
    except ValueError as exc:
        raise _fail(command, f"--target: {exc}") from None
    return value


class _Live:
    """One output updated in place: display(..., display_id=True) on the first call, then .update().
    Nothing is shown before the first call (an argument the engine rejects leaves only its one line)."""

    def __init__(self) -> None:
        self.handle: Any = None

    def show(self, bundle: Dict[str, Any]) -> None:
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)

    def stop(self, bundle: Dict[str, Any]) -> None:
        """Replace the progress output, if there is one."""
        if self.handle is not None:
            self.handle.update(bundle, raw=True)


def _progress_bundle(text: str, table: Optional[str] = None) -> Dict[str, str]:
    import html

    plain = text if table is None else f"{text}\n{table}"
    return {"text/plain": plain, "text/html": f"<pre class='gpumem-progress'>{html.escape(plain)}</pre>"}


# --- the last recommendation (for the OOM checklist) ---------------------------------------------------------


def last_recommendation(shell: Any) -> Optional[int]:
    """The `recommended` batch of this kernel's last `%gpumem analyze` / `recommend`, or None."""
    return getattr(shell, _LAST_RECOMMENDATION, None)


def remember(shell: Any, report: Any) -> None:
    setattr(shell, _LAST_RECOMMENDATION, report.recommendations.recommended)


# --- analyze and recommend -----------------------------------------------------------------------------------

_EXAMPLES = """
examples:
  %gpumem analyze model --batch 32 --input 3x224x224
  %gpumem analyze model -b 32 --target "RTX 4080 Super" --amp bf16 --optimizer adamw
  %gpumem analyze lm -b 8 --input 512 --vocab 32000 --memory 24GiB --checkpointing
  %gpumem analyze model -b 16 --input make_batch --loss my_loss --optimizer opt --device cuda:0
  %gpumem analyze model -b 8 --world-size 4 --strategy zero2 --target H100
  %gpumem analyze model -b 32 --input 3x224x224 --memory 16GiB --round 8
  %gpumem analyze model -b 32 --input 3x224x224 --timeline --save step.pickle"""

_ANALYSIS_ARGUMENTS = [
    argument("model", metavar="MODEL", help="name of a torch.nn.Module in this kernel (model, trainer.model)"),
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
        help="adamw (default), adam, sgd, sgd-momentum (these names first), or your optimizer variable "
        "(its class, settings and state are used)",
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
    argument("--memory", metavar="SIZE", help="plan for this much device memory, e.g. 16GiB or 24GB"),
    argument(
        "--round",
        type=argcheck.rounding,
        metavar="pow2|N|none",
        help="round the recommended and safe picks down to a power of two (pow2), a multiple of N (e.g. 8) or "
        'only to a whole batch (none); default: the JupyterLab setting "Batch-size rounding", else pow2',
    ),
    argument("--multiple", type=argcheck.count, metavar="N", help="same as --round N"),
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


def run_analysis(shell: Any, args: Any, command: str, timeline: bool = False) -> Any:
    """analyze() with the line's options; the report, remembered for the OOM checklist. With `timeline`:
    (report, the History of its traced step)."""
    from gpumem_kernel.analysis.analyze import analyze

    model = _module(shell, args.model, command)
    options = dict(
        batch_size=args.batch,
        input=_input(shell, args.input, command),
        loss=_loss(shell, args.loss, command),
        optimizer=_optimizer(shell, args.optimizer, command),
        amp=_amp(args.amp),
        grad_accum=args.accum,
        checkpointing=args.checkpointing,
        device=args.device,
        target=_target(args.target, command),
        memory=_memory(args.memory, "--memory", command),
        world_size=args.world_size,
        strategy=args.strategy,
        multiple=args.multiple,
        rounding=args.round,
        effective_batch=args.effective_batch,
        vocab_size=args.vocab,
        eval_batch=args.eval_batch,
    )
    try:
        if timeline:
            from gpumem_kernel.timeline.predicted import predict

            report, history = predict(model, **options)
        else:
            report, history = analyze(model, **options), None
    except ValueError as exc:
        if _debug():
            raise
        raise _fail(command, _one_line(exc)) from None
    remember(shell, report)
    return (report, history) if timeline else report


def analyze(shell: Any, rest: str) -> None:
    from gpumem_kernel.analysis.render import analysis_bundle
    from gpumem_kernel.timeline.predicted import option_problem

    args = parse(analyze_arguments, "analyze", rest)
    problem = option_problem(
        timeline=args.timeline, save=args.save, world_size=args.world_size, strategy=args.strategy, json=args.json
    )
    if problem is not None:
        raise _fail("analyze", problem)
    if not args.timeline:
        report = run_analysis(shell, args, "analyze")
        history = None
    else:
        report, history = run_analysis(shell, args, "analyze", timeline=True)
    if args.json:
        print(json.dumps(report.to_payload(), indent=2))
    else:
        display(analysis_bundle(report), raw=True)
    if history is not None:
        _show_timeline(history, args.save, show=not args.json)


def _show_timeline(history: Any, save: Optional[str], show: bool = True) -> None:
    """The timeline output after the analysis, and the file --save names."""
    from gpumem_kernel.timeline.export import save as save_history
    from gpumem_kernel.timeline.payload import build_payload, timeline_bundle

    if show:
        display(timeline_bundle(build_payload(history)), raw=True)
    if save is not None:
        try:
            kind = save_history(history, save)
        except OSError as exc:
            raise _fail("analyze", f"--save {shown(save)}: {exc.strerror or exc}") from None
        what = (
            "PyTorch memory snapshot (pytorch.org/memory_viz)" if kind == "snapshot" else "CSV, one row per allocation"
        )
        print(f"timeline saved to {save}: {what}")


def recommend_bundle(payload: Dict[str, Any]) -> Dict[str, str]:
    """The picks of an analysis payload: text/plain (the analysis guide's recommendation block) and text/html."""
    from gpumem_kernel.analysis.render import BANNER, _e, _recommendation_block, _table, _title, pick_rows

    recs = payload["recommendations"]
    bound = payload["error_bound"]["statement"]
    text = [BANNER, _title(payload), BANNER] + _recommendation_block(payload)
    text += ["", f"Engine: {payload['engine']}; error bound: {bound}", BANNER]
    html = (
        f"<div class='gpumem-recommend'><p><b>{_e(_title(payload))}</b> — engine <b>{_e(payload['engine'])}"
        f"</b>; model {_e(payload['model']['name'])}</p>"
        + _table("Batch sizes", ("pick", "batch", "note"), pick_rows(payload))
        + f"<p>{_e(recs['lr']['hint'])}</p><p><i>{_e(bound)}</i></p></div>"
    )
    return {"text/plain": "\n".join(text), "text/html": html}


def recommend(shell: Any, rest: str) -> None:
    args = parse(recommend_arguments, "recommend", rest)
    report = run_analysis(shell, args, "recommend")
    payload = report.to_payload()
    if args.json:
        recs = payload["recommendations"]
        print(
            json.dumps(
                {
                    "maximum": recs["maximum"],
                    "recommended": recs["recommended"],
                    "safe": recs["safe"],
                    "current": recs["current"],
                    "engine": payload["engine"],
                },
                indent=2,
            )
        )
    else:
        display(recommend_bundle(payload), raw=True)


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


def _trial_line(name: str, number: int, trial: Any, best: Optional[int], simulated: bool) -> str:
    result = "ok" if trial.ok else ("OOM (simulated)" if simulated else "OOM")
    return (
        f"autobatch {name}: trial {number}, batch {trial.batch} ({trial.phase}): {result} in "
        f"{trial.seconds:.2f} s; largest that ran so far: {best or 'none'}"
    )


def autobatch(shell: Any, rest: str) -> None:
    from gpumem_kernel.autobatch.search import auto_select_batch_size, autobatch_bundle

    command = "autobatch"
    args = parse(autobatch_arguments, command, rest)
    model = _module(shell, args.model, command)
    options = dict(
        input=_input(shell, args.input, command),
        loss=_loss(shell, args.loss, command),
        optimizer=_optimizer(shell, args.optimizer, command),
        amp=_amp(args.amp),
        margin=args.margin,
        multiple=args.multiple,
        rounding=args.round,
        max_batch=args.max,
        simulate=_memory(args.simulate, "--simulate", command),
        steps=args.steps,
    )
    simulated = args.simulate is not None
    live = _Live()
    trials: List[Any] = []

    def progress(trial: Any) -> None:
        trials.append(trial)
        best = max((t.batch for t in trials if t.ok), default=None)
        live.show(_progress_bundle(_trial_line(args.model, len(trials), trial, best, simulated)))

    try:
        result = auto_select_batch_size(model, args.device, args.batch, progress=progress, **options)
    except KeyboardInterrupt:
        live.stop(_progress_bundle(f"autobatch {args.model}: interrupted before the search began"))
        raise
    except Exception as exc:
        live.stop(_progress_bundle(f"autobatch {args.model}: stopped"))
        if _debug() or not isinstance(exc, (ValueError, RuntimeError, TypeError, IndexError)):
            raise
        raise _engine_error(command, exc) from None
    live.show(autobatch_bundle(result))


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


def _rows_text(rows: List[Dict[str, Any]], engine: str) -> str:
    from gpumem_kernel.benchmark.report import _table

    return "\n".join(_table({"rows": rows, "engine": engine}))


def benchmark(shell: Any, rest: str) -> None:
    from gpumem_kernel.analysis.arguments import parse_shape
    from gpumem_kernel.benchmark.config import check_value, load_config
    from gpumem_kernel.benchmark.report import benchmark_bundle
    from gpumem_kernel.benchmark.sweep import run_benchmark

    command = "benchmark"
    args = parse(benchmark_arguments, command, rest)
    model = _module(shell, args.model, command)
    sources = [s for s in ("dataset", "loader_factory", "synthetic") if getattr(args, s) is not None]
    if len(sources) != 1:
        raise _fail(command, "give one data source: --dataset VAR, --loader-factory VAR or --synthetic SHAPE")
    if args.classes is not None and args.synthetic is None:
        raise _fail(command, "--classes goes with --synthetic")
    batch_sizes = None if args.batch_sizes is None else " ".join(args.batch_sizes)
    workers = None if args.num_workers is None else " ".join(args.num_workers)
    try:
        if batch_sizes is not None:
            check_value("batch_sizes", batch_sizes, "--batch-sizes")
        if workers is not None:
            check_value("num_workers_options", workers, "--num-workers")
        if args.steps is not None:
            check_value("steps_per_test", args.steps, "--steps")
        if args.warmup is not None:
            check_value("warmup_steps", args.warmup, "--warmup")
        if args.memory_target is not None:
            check_value("memory_target", args.memory_target, "--memory-target")
        if args.synthetic is not None:
            parse_shape(args.synthetic)
        config = load_config(args.config)
    except ValueError as exc:
        raise _fail(command, _one_line(exc)) from None
    dataset = lookup(shell, args.dataset, command, "--dataset") if args.dataset else None
    factory = lookup(shell, args.loader_factory, command, "--loader-factory") if args.loader_factory else None
    if factory is not None and not callable(factory):
        raise _fail(command, f"--loader-factory {args.loader_factory}: a {type(factory).__name__} is not callable")
    options = dict(
        dataset=dataset,
        loader_factory=factory,
        synthetic_shape=args.synthetic,
        num_classes=args.classes,
        config=config,
        batch_sizes=batch_sizes,
        num_workers=workers,
        steps=args.steps,
        warmup_steps=args.warmup,
        memory_target=args.memory_target,
        device=args.device,
        simulate=_memory(args.simulate, "--simulate", command),
        optimizer=_optimizer(shell, args.optimizer, command),
        loss=_loss(shell, args.loss, command),
    )
    engine = "simulated" if args.simulate is not None else ""
    rows: List[Dict[str, Any]] = []
    live = _Live()

    def on_row(row: Any) -> None:
        rows.append(asdict(row))
        live.show(_progress_bundle(f"benchmark {args.model}: {len(rows)} row(s) so far", _rows_text(rows, engine)))

    try:
        result = run_benchmark(model, on_row=on_row, **options)
    except KeyboardInterrupt:
        live.stop(_progress_bundle(f"benchmark {args.model}: interrupted"))
        raise
    except Exception as exc:
        live.stop(_progress_bundle(f"benchmark {args.model}: stopped", _rows_text(rows, engine) if rows else None))
        if _debug() or not isinstance(exc, (ValueError, RuntimeError, TypeError, IndexError, OSError)):
            raise
        raise _engine_error(command, exc) from None
    live.show(benchmark_bundle(result))
    if args.save_yaml:
        try:
            with open(args.save_yaml, "w", encoding="utf-8") as handle:
                handle.write(result.to_yaml())
        except OSError as exc:
            raise _fail(command, f"--save-yaml {args.save_yaml}: {exc.strerror or exc}") from None
        print(f"recommended configuration written to {args.save_yaml}")
