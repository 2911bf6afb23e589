"""`python -m gpumem_kernel <command> ...`: the notebook's tools from a terminal.

Subcommands register themselves in `COMMANDS` (see `register`); `main(argv)` parses, runs one and returns
its exit status. Every error is one line on stderr and exit status 2 (`GPUMEM_DEBUG=1` shows the traceback).

    python -m gpumem_kernel benchmark --config cfg.yaml --model mypkg.models:build \\
        --synthetic 3x64x64 --classes 10 --batch-sizes 8,16,32 --num-workers 0 2 --steps 5 --simulate 6GiB
    python -m gpumem_kernel autobatch --model mypkg.models:build --input 3x64x64 --simulate 6GiB
    python -m gpumem_kernel info
    python -m gpumem_kernel analyze --model mypkg.models:build --batch 32 --input 3x224x224 \\
        --target "RTX 4080 Super" --amp bf16 --optimizer adamw
    python -m gpumem_kernel analyze --model hf:Qwen/Qwen2.5-7B --batch 1 --input 2048 --amp bf16 --target H100
    python -m gpumem_kernel analyze --model hf:meta-llama/Llama-3.2-1B -b 1 --seq 4096 --amp bf16 \\
        --checkpointing --target "RTX 4090" --search seq --seq-batches 1,4
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from gpumem_kernel.analysis import OPTIMIZERS
from gpumem_kernel.magics import argcheck
from gpumem_kernel.magics.argcheck import AUTO, CPU, CUDA, INDEX
from gpumem_kernel.magics.parsing import attach_negative_values
from gpumem_kernel.magics.shared_options import CLI, add_options, request_fields
from gpumem_kernel.render.text import one_line

PROG = "python -m gpumem_kernel"


class CliError(Exception):
    """A one-line message for stderr; exit status 2."""


@dataclass
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]  # adds the command's arguments
    run: Callable[[argparse.Namespace], int]  # returns the exit status


COMMANDS: Dict[str, Command] = {}


def register(command: Command) -> Command:
    """Add (or replace) a subcommand; `main` lists them in registration order."""
    COMMANDS[command.name] = command
    return command


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise CliError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="GPU memory tools of jupyterlab-gpumem, from a terminal.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS.values():
        command.configure(sub.add_parser(command.name, help=command.help, description=command.help))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(attach_negative_values(parser, args_list))
        args.argv = tuple(args_list)  # the words as typed: the fit advice's rows add their flags to them
        if not args.command:
            parser.print_help(sys.stderr)
            return 2
        return COMMANDS[args.command].run(args)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, not a traceback: the message names what to fix
        if os.environ.get("GPUMEM_DEBUG"):
            raise
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    text = one_line(str(exc))
    if isinstance(exc, (CliError, ValueError)):
        return text or type(exc).__name__
    return one_line(f"{type(exc).__name__}: {text}") if text else type(exc).__name__


# --- shared argument handling ---------------------------------------------------------------------------------


def load_object(spec: str, what: str = "--model") -> Any:
    """'package.module:attribute' (attribute may be dotted) -> the object; modules import from the current
    directory too, as `python -m` does."""
    if ":" not in spec:
        raise CliError(f"{what} {spec!r}: expected module:factory, e.g. mypkg.models:build_model")
    module_name, attribute = spec.split(":", 1)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(f"{what} {spec!r}: cannot import {module_name} ({exc})") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise CliError(f"{what} {spec!r}: {module_name} has no attribute {attribute}")
        target = getattr(target, part)
    return target


def load_model(spec: str) -> Any:
    """A torch.nn.Module from a factory (called without arguments), a class, or a module instance."""
    import torch

    target = load_object(spec)
    model = target if isinstance(target, torch.nn.Module) else target() if callable(target) else target
    if not isinstance(model, torch.nn.Module):
        raise CliError(f"--model {spec!r}: returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        metavar="MODULE:FACTORY",
        help="importable factory (or class, or module instance) of the model",
    )
    parser.add_argument(
        "--device",
        type=argcheck.device(CPU, AUTO, CUDA, INDEX),
        help="cpu, cuda, cuda:N, N or auto (default: where the model is)",
    )
    parser.add_argument(
        "--simulate", metavar="SIZE", help="no GPU: run on the CPU against this cap on tracked tensor bytes, e.g. 6GiB"
    )
    parser.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS)
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _joined(values: Optional[List[str]]) -> Optional[str]:
    """--batch-sizes 8,16,32 and --batch-sizes 8 16 32 alike."""
    return None if values is None else " ".join(values)


def _cross_entropy(classes: int) -> Callable[[Any, Any], Any]:
    """Loss for class-count models given shapes only: targets of class 0 take the same memory as real ones."""

    def loss(output: Any, batch: Any) -> Any:
        import torch
        import torch.nn.functional as F

        target = torch.zeros(output.shape[0], dtype=torch.long, device=output.device)
        return F.cross_entropy(output.float(), target)

    loss.__name__ = f"cross_entropy_{classes}_classes"
    return loss


# --- benchmark -------------------------------------------------------------------------------------------------


def _configure_benchmark(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    parser.add_argument("--config", metavar="YAML", help="the benchmark guide's config: a `benchmark:` section")
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--synthetic", metavar="SHAPE", help="synthetic samples of this shape, e.g. 3x64x64")
    data.add_argument("--dataset", metavar="MODULE:FACTORY", help="importable Dataset factory")
    parser.add_argument("--data-path", help="passed to the --dataset factory as its one argument")
    parser.add_argument("--classes", type=argcheck.count, help="with --synthetic: class labels 0..N-1 (cross-entropy)")
    parser.add_argument("--batch-sizes", nargs="+", metavar="N", help="override benchmark.batch_sizes")
    parser.add_argument("--num-workers", nargs="+", metavar="N", help="override benchmark.num_workers_options")
    parser.add_argument("--steps", type=int, help="override benchmark.steps_per_test")
    parser.add_argument("--warmup", type=int, help="override benchmark.warmup_steps")
    parser.add_argument("--memory-target", type=float, help="override benchmark.memory_target (0-1]")
    parser.add_argument(
        "--format",
        default="text",
        choices=("text", "json", "yaml"),
        help="text: the benchmark guide's summary; json: the payload; yaml: the recommended config",
    )
    parser.add_argument("--save-yaml", metavar="PATH", help="also write the recommended config here")


def _dataset(args: argparse.Namespace) -> Any:
    if args.dataset is None:
        if args.data_path is not None:
            raise CliError("--data-path needs --dataset MODULE:FACTORY (a factory that reads it)")
        return None
    factory = load_object(args.dataset, "--dataset")
    return factory(args.data_path) if args.data_path is not None else factory()


def _print_row(row: Any) -> None:
    speed = f"{row.samples_per_s:.1f} samples/s" if row.samples_per_s else row.status
    print(
        f"  batch {row.batch_size:>6}  workers {row.num_workers:>2}  AMP {'on ' if row.amp else 'off'}  "
        f"pin {'on ' if row.pin_memory else 'off'}  {speed}",
        file=sys.stderr,
        flush=True,
    )


def _run_benchmark(args: argparse.Namespace) -> int:
    from gpumem_kernel.benchmark.config import check_value
    from gpumem_kernel.benchmark.sweep import run_benchmark

    batch_sizes = _joined(args.batch_sizes)
    workers = _joined(args.num_workers)
    if batch_sizes is not None:
        check_value("batch_sizes", batch_sizes, "--batch-sizes")
    if workers is not None:
        check_value("num_workers_options", workers, "--num-workers")
    if args.classes is not None and args.synthetic is None:
        raise CliError("--classes goes with --synthetic")
    model = load_model(args.model)
    result = run_benchmark(
        model,
        dataset=_dataset(args),
        synthetic_shape=args.synthetic,
        num_classes=args.classes,
        config=args.config,
        batch_sizes=batch_sizes,
        num_workers=workers,
        steps=args.steps,
        warmup_steps=args.warmup,
        memory_target=args.memory_target,
        device=args.device,
        simulate=args.simulate,
        optimizer=args.optimizer,
        on_row=None if args.quiet else _print_row,
    )
    if args.save_yaml:
        with open(args.save_yaml, "w", encoding="utf-8") as handle:
            handle.write(result.to_yaml())
    if args.format == "json":
        print(json.dumps(result.to_payload(), indent=2))
    elif args.format == "yaml":
        print(result.to_yaml(), end="")
    else:
        print(str(result))
    return 0


# --- autobatch -------------------------------------------------------------------------------------------------


def _configure_autobatch(parser: argparse.ArgumentParser) -> None:
    _add_common(parser)
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument(
        "--input", metavar="SHAPE", help="one sample's shape, e.g. 3x224x224 (default: from a first Linear layer)"
    )
    shape.add_argument("--synthetic", metavar="SHAPE", help="same as --input (the benchmark's spelling)")
    parser.add_argument(
        "--classes",
        type=argcheck.count,
        help="cross-entropy over this many classes (default: mean of squares of the output)",
    )
    parser.add_argument(
        "--start-batch", type=argcheck.count, help="first batch to try (default: the analysis prediction)"
    )
    parser.add_argument("--amp", choices=("fp16", "bf16"))
    parser.add_argument("--margin", type=float, default=0.10, help="recommended = maximum x (1 - margin)")
    parser.add_argument(
        "--round",
        type=argcheck.rounding,
        metavar="pow2|N|none",
        help="round the recommendation down to a power of two (default), a multiple of N (e.g. 8) or a whole batch",
    )
    parser.add_argument("--multiple", type=argcheck.count, help="same as --round N")
    parser.add_argument("--max-batch", type=argcheck.count, default=2**16)
    parser.add_argument("--steps", type=int, default=2, help="training steps per trial (>= 2)")
    parser.add_argument("--no-predict", action="store_true", help="skip the analysis prediction")
    parser.add_argument("--format", default="text", choices=("text", "json"))


def _print_trial(trial: Any) -> None:
    result = "ok" if trial.ok else "OOM"
    print(
        f"  trial batch {trial.batch:>7} ({trial.phase}): {result} in {trial.seconds:.2f} s",
        file=sys.stderr,
        flush=True,
    )


def _run_autobatch(args: argparse.Namespace) -> int:
    from gpumem_kernel.autobatch.search import auto_select_batch_size

    model = load_model(args.model)
    result = auto_select_batch_size(
        model,
        args.device,
        args.start_batch,
        input=args.input or args.synthetic,
        loss=_cross_entropy(args.classes) if args.classes else None,
        optimizer=args.optimizer,
        amp=args.amp,
        margin=args.margin,
        multiple=args.multiple,
        rounding=args.round,
        max_batch=args.max_batch,
        simulate=args.simulate,
        steps=args.steps,
        predict=not args.no_predict,
        progress=None if args.quiet else _print_trial,
    )
    print(json.dumps(result.to_payload(), indent=2) if args.format == "json" else str(result))
    return 0


# --- info --------------------------------------------------------------------------------------------------------


def _configure_info(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        default="text",
        choices=("text", "json"),
        help="text: the analysis guide's check script; json: the probe's sample",
    )


def info_text(sample: Dict[str, Any]) -> str:
    """The analysis guide's check_gpu_memory script: every GPU's memory, compute capability and SM count, then host
    memory. From NVML only: CUDA is never initialised."""
    from gpumem_kernel.render.status import BANNER
    from gpumem_kernel.render.units import format_bytes, format_percent

    gpu = sample["gpu"]
    devices = [d for d in gpu["devices"] if d.get("cuda_index") is not None]
    lines = [BANNER]
    if not gpu["available"] or not devices:
        why = gpu.get("reason") or (
            f"CUDA_VISIBLE_DEVICES={gpu.get('visible_devices')!r} hides every GPU"
            if gpu["available"]
            else "unknown reason"
        )
        lines += [f"No NVIDIA GPU visible: {why}", BANNER]
    else:
        versions = [
            f"driver {gpu['driver_version']}" if gpu.get("driver_version") else "",
            f"CUDA {gpu['cuda_driver_version']}" if gpu.get("cuda_driver_version") else "",
        ]
        known = ", ".join(v for v in versions if v)
        title = f"🖥️  {len(devices)} GPU{'s' if len(devices) > 1 else ''} visible"
        title += f" ({known})" if known else ""
        lines += [title, BANNER]
        for d in devices:
            total = d.get("total")
            lines += [
                f"GPU {d['cuda_index']}: {'MIG slice ' if d.get('mig') else ''}{d.get('name') or 'unknown'}",
                f"  Total Memory:     {format_bytes(total)}",
                f"  Used:             {format_bytes(d.get('used'))} ({format_percent(d.get('used'), total)})",
                f"  Free:             {format_bytes(d.get('free'))}",
                f"  Compute:          {d.get('compute_capability') or 'n/a'}",
                f"  Multiprocessors:  {d.get('sm_count') or 'n/a (known once CUDA is initialised)'}",
            ]
        lines.append(BANNER)
    host = sample["host"]
    lines += [
        "Host",
        f"  Total Memory:     {format_bytes(host['total'])}",
        f"  Available:        {format_bytes(host['available'])} ({format_percent(host['available'], host['total'])})",
        f"  Container limit:  {format_bytes(host['container_limit']) if host.get('container_limit') else 'none'}",
        f"  This process:     {format_bytes(host['rss'], 'auto')} RSS",
        BANNER,
    ]
    return "\n".join(lines)


def _run_info(args: argparse.Namespace) -> int:
    from gpumem_kernel.probe.prober import probe

    sample = probe().to_dict()
    print(json.dumps(sample, indent=2) if args.format == "json" else info_text(sample))
    return 0


# --- analyze -----------------------------------------------------------------------------------------------------


def _configure_analyze(parser: argparse.ArgumentParser) -> None:
    add_options(parser, CLI)


def _run_analyze(args: argparse.Namespace) -> int:
    from gpumem_kernel.analysis import AnalysisRequest
    from gpumem_kernel.timeline.predicted import option_problem, predict

    problem = option_problem(
        timeline=args.timeline,
        save=args.save,
        world_size=args.world_size,
        strategy=args.strategy,
        json=args.format == "json",
        advise=args.advise,
    )
    if problem is not None:
        raise CliError(problem)
    from gpumem_kernel.analysis import analyze_named, is_model_source

    by_name = is_model_source(args.model)
    model = None if by_name else load_model(args.model)
    options = request_fields(args, CLI)
    options.update(
        loss=_cross_entropy(args.classes) if args.classes else None, amp=None if args.amp == "off" else args.amp
    )
    request = AnalysisRequest(**options)
    # with --advise always, else where the step will not fit and the levers' analyses are quick (ADVICE_SECONDS)
    advised = functools.partial(_advised, when=True if args.advise else None, command=_analysed_command(args.argv))
    if by_name:  # built on the meta device from its config (analysis.model_source)
        run = predict if args.timeline else advised
        result = analyze_named(args.model, request, task=args.task, trust_remote_code=args.trust_remote_code, run=run)
        report, history = result if args.timeline else (result, None)
    elif args.timeline:
        report, history = predict(model, **request.options())
    else:
        report, history = advised(model, **request.options()), None
    print(json.dumps(report.to_payload(), indent=2) if args.format == "json" else str(report))
    if history is not None:
        _timeline_out(history, args.save, text=args.format == "text")
    return 0


def _advised(model: Any, when: Optional[bool], command: str, **options: Any) -> Any:
    """The report, with what makes it fit in its payload where `when` asks (analysis.analyzed_with_advice)."""
    from gpumem_kernel.analysis import AnalysisRequest, analyzed_with_advice

    return analyzed_with_advice(model, AnalysisRequest(**options), when, command)[0]


def _analysed_command(argv: Sequence[str]) -> str:
    """The analyze command as typed, without --advise and --format: what each advice row adds its flags to."""
    kept: List[str] = []
    words = iter(argv)
    for word in words:
        if word == "--format":
            next(words, None)
        elif word != "--advise" and not word.startswith("--format="):
            kept.append(shlex.quote(word))
    return " ".join([PROG] + kept)


def _timeline_out(history: Any, save: Optional[str], text: bool) -> None:
    from gpumem_kernel.timeline.export import save as save_history
    from gpumem_kernel.timeline.payload import build_payload, summary_text

    if text:
        print()
        print(summary_text(build_payload(history)))
    if save is not None:
        kind = save_history(history, save)
        what = "PyTorch memory snapshot (pytorch.org/memory_viz)" if kind == "snapshot" else "CSV"
        print(f"timeline saved to {save}: {what}", file=sys.stderr if not text else sys.stdout)


register(
    Command(
        "info",
        "GPUs (memory, compute capability, SMs) and host memory, without initialising CUDA",
        _configure_info,
        _run_info,
    )
)
register(
    Command(
        "analyze",
        "memory of one training step and the batch sizes that fit (traced or measured)",
        _configure_analyze,
        _run_analyze,
    )
)
register(
    Command(
        "autobatch",
        "find the largest batch that trains without running out of memory",
        _configure_autobatch,
        _run_autobatch,
    )
)
register(
    Command(
        "benchmark",
        "sweep batch sizes x DataLoader workers x AMP x pin_memory (the benchmark guide)",
        _configure_benchmark,
        _run_benchmark,
    )
)
