"""`%gpumem benchmark`: run_benchmark() with the line's options, rows shown as they finish, and --save-yaml."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Dict, List

from gpumem_kernel.magics.options import benchmark_arguments
from gpumem_kernel.magics.autobatch import engine_error
from gpumem_kernel.magics.parsing import debug_enabled, usage_error, engine_message_line, parse
from gpumem_kernel.magics.progress import LiveOutput, progress_bundle
from gpumem_kernel.magics.resolve import resolve_loss, resolve_memory, resolve_module, resolve_optimizer, lookup


def _rows_text(rows: List[Dict[str, Any]], engine: str) -> str:
    from gpumem_kernel.benchmark.report import table_lines

    return "\n".join(table_lines({"rows": rows, "engine": engine}))


def benchmark(shell: Any, rest: str) -> None:
    from gpumem_kernel.analysis import parse_shape
    from gpumem_kernel.benchmark.config import check_value, load_config
    from gpumem_kernel.benchmark.report import benchmark_bundle
    from gpumem_kernel.benchmark.sweep import run_benchmark

    command = "benchmark"
    args = parse(benchmark_arguments, command, rest)
    model = resolve_module(shell, args.model, command)
    sources = [s for s in ("dataset", "loader_factory", "synthetic") if getattr(args, s) is not None]
    if len(sources) != 1:
        raise usage_error(command, "give one data source: --dataset VAR, --loader-factory VAR or --synthetic SHAPE")
    if args.classes is not None and args.synthetic is None:
        raise usage_error(command, "--classes goes with --synthetic")
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
        raise usage_error(command, engine_message_line(exc)) from None
    dataset = lookup(shell, args.dataset, command, "--dataset") if args.dataset else None
    factory = lookup(shell, args.loader_factory, command, "--loader-factory") if args.loader_factory else None
    if factory is not None and not callable(factory):
        raise usage_error(
            command, f"--loader-factory {args.loader_factory}: a {type(factory).__name__} is not callable"
        )
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
        simulate=resolve_memory(args.simulate, "--simulate", command),
        optimizer=resolve_optimizer(shell, args.optimizer, command),
        loss=resolve_loss(shell, args.loss, command),
    )
    engine = "simulated" if args.simulate is not None else ""
    rows: List[Dict[str, Any]] = []
    live = LiveOutput()

    def on_row(row: Any) -> None:
        rows.append(asdict(row))
        live.show(progress_bundle(f"benchmark {args.model}: {len(rows)} row(s) so far", _rows_text(rows, engine)))

    try:
        result = run_benchmark(model, on_row=on_row, **options)
    except KeyboardInterrupt:
        live.stop(progress_bundle(f"benchmark {args.model}: interrupted"))
        raise
    except Exception as exc:
        live.stop(progress_bundle(f"benchmark {args.model}: stopped", _rows_text(rows, engine) if rows else None))
        if debug_enabled() or not isinstance(exc, (ValueError, RuntimeError, TypeError, IndexError, OSError)):
            raise
        raise engine_error(command, exc) from None
    live.show(benchmark_bundle(result))
    if args.save_yaml:
        try:
            with open(args.save_yaml, "w", encoding="utf-8") as handle:
                handle.write(result.to_yaml())
        except OSError as exc:
            raise usage_error(command, f"--save-yaml {args.save_yaml}: {exc.strerror or exc}") from None
        print(f"recommended configuration written to {args.save_yaml}")
