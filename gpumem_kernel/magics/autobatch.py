"""`%gpumem autobatch`: auto_select_batch_size() with the line's options, each trial shown as it ends."""

from __future__ import annotations

from typing import Any, List, Optional

from IPython.core.error import UsageError

from gpumem_kernel.magics.options import autobatch_arguments
from gpumem_kernel.magics.parsing import debug_enabled, engine_usage_error, usage_error, parse
from gpumem_kernel.magics.progress import LiveOutput, progress_bundle
from gpumem_kernel.magics.resolve import (
    resolve_amp,
    resolve_input,
    resolve_loss,
    resolve_memory,
    resolve_module,
    resolve_optimizer,
)


def engine_error(command: str, exc: BaseException) -> UsageError:
    """The one line of an engine's error; a failed training step (StepError) as it says, with the type the step
    raised (a user's ValueError is not taken for a bad option), and where its traceback is."""
    from gpumem_kernel.analysis import StepError

    if isinstance(exc, StepError):
        return usage_error(command, f"{exc} (check --input, --loss; GPUMEM_DEBUG=1 shows the traceback)")
    return engine_usage_error(command, exc)


def _trial_line(name: str, number: int, trial: Any, best: Optional[int], simulated: bool) -> str:
    result = "ok" if trial.ok else ("OOM (simulated)" if simulated else "OOM")
    return (
        f"autobatch {name}: trial {number}, batch {trial.batch} ({trial.phase}): {result} in "
        f"{trial.seconds:.2f} s; largest that ran so far: {best or 'none'}"
    )


def autobatch(shell: Any, rest: str) -> None:
    from gpumem_kernel.autobatch.search import auto_select_batch_size, autobatch_bundle
    from gpumem_kernel.magics.analysis import browser_settings

    command = "autobatch"
    args = parse(autobatch_arguments, command, rest)
    model = resolve_module(shell, args.model, command)
    options = dict(
        input=resolve_input(shell, args.input, command),
        loss=resolve_loss(shell, args.loss, command),
        optimizer=resolve_optimizer(shell, args.optimizer, command),
        amp=resolve_amp(args.amp),
        margin=args.margin,
        multiple=args.multiple,
        rounding=args.round,
        rounding_setting=browser_settings().get("rounding_setting"),
        max_batch=args.max,
        simulate=resolve_memory(args.simulate, "--simulate", command),
        steps=args.steps,
    )
    simulated = args.simulate is not None
    live = LiveOutput()
    trials: List[Any] = []

    def progress(trial: Any) -> None:
        trials.append(trial)
        best = max((t.batch for t in trials if t.ok), default=None)
        live.show(progress_bundle(_trial_line(args.model, len(trials), trial, best, simulated)))

    try:
        result = auto_select_batch_size(model, args.device, args.batch, progress=progress, **options)
    except KeyboardInterrupt:
        live.stop(progress_bundle(f"autobatch {args.model}: interrupted before the search began"))
        raise
    except Exception as exc:
        live.stop(progress_bundle(f"autobatch {args.model}: stopped"))
        if debug_enabled() or not isinstance(exc, (ValueError, RuntimeError, TypeError, IndexError)):
            raise
        raise engine_error(command, exc) from None
    live.show(autobatch_bundle(result))
