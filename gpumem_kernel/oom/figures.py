"""What each lever does for the model that failed, in figures: the analysis' fit advice (`analysis.advise`, the
rows of `%gpumem analyze --advise`) put on the checklist steps those levers are ("gradient checkpointing: peak
31.2 GiB → fits at batch 8"), each figure the advice row's own, to the byte.

The advice comes from the last analysis when it was for this model and computed it (instant), else it is computed
here for a small model only and within INLINE_SECONDS (SMALL_MODEL_PARAMETERS, SMALL_MODEL_MODULES), else the
checklist offers a step whose cell runs it (`%gpumem analyze <model> -b <batch> --advise`): the error's checklist
never waits for a big model's analyses. Nothing here imports torch or the analysis (which imports this package): the
computation is handed in.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from gpumem_kernel.oom.analyzed import AnalyzedModel, FailedModel, parameter_count
from gpumem_kernel.oom.diagnosis import Diagnosis
from gpumem_kernel.oom.parse import OomInfo
from gpumem_kernel.oom.step import Step, StepFigure
from gpumem_kernel.render.units import human

# The advice is one analysis for the step as it is and one per lever (more GPUs, other GPUs, combinations), each
# with its batch search: on 2 busy CPU cores a model of 8 k parameters in 3 modules took 87 s in all, and the
# trace's time grows with the layers run and their sizes. So the checklist tries it only for a model of at most
# 100 k parameters in at most 8 modules (read without tracing), and gives up after INLINE_SECONDS (the analysis
# tells its progress at each trace, where the budget is checked): then, and for a larger model, FIT_ADVICE_STEP
# inserts the line that computes it, which the user runs when ready.
SMALL_MODEL_PARAMETERS = 100_000
SMALL_MODEL_MODULES = 8
INLINE_SECONDS = 3.0
FIT_ADVICE_STEP = "fit-advice"
EIGHT_BIT_STEP = "8bit-optimizer"

# The checklist step each advice row's lever is (keys of the analysis payload's advice rows); a combination
# ("amp-bf16+checkpointing") or a lever with no step here (more GPUs, LoRA) has none.
STEP_OF_KEY: Dict[str, str] = {
    "amp-bf16": "mixed-precision",
    "checkpointing": "grad-checkpointing",
    "micro-batch": "grad-accumulation",
    "8bit-optimizer": EIGHT_BIT_STEP,
    "shorter-sequence": "smaller-inputs",
    "expandable-segments": "expandable-segments",
}

# The families whose error is a training step's device memory running out, which the levers change (not the host's
# RAM, NCCL's buffers, XLA's or vLLM's KV cache).
ADVISED_FAMILIES = ("cuda_allocator", "xpu", "driver", "cublas", "cudnn", "mps")

_STATUS_WORDS = {"fits": "fits", "tight": "fits, tightly,", "will-not-fit": "does not fit"}


@dataclass(frozen=True)
class FitAdvice:
    """The advice for the failed model and the batch it was computed at."""

    advice: Any  # analysis.Advice
    batch: int
    source: str  # as StepFigure.source


def row_key(row: Any) -> Optional[str]:
    """The row's key: its own, else read from what the lever changes (advice rows that predate keys)."""
    key = getattr(row, "key", None)
    if isinstance(key, str) and key:
        return key
    changes: Mapping[str, Any] = getattr(row, "changes", None) or {}
    parts: List[str] = []
    if changes.get("amp") is not None:
        parts.append(f"amp-{changes['amp']}")
    if changes.get("checkpointing"):
        parts.append("checkpointing")
    if "batch_size" in changes and "grad_accum" in changes:
        parts.append("micro-batch")
    optimizer = str(changes.get("optimizer") or "").lower()
    if "8bit" in optimizer:
        parts.append("paged-optimizer" if "paged" in optimizer else "8bit-optimizer")
    elif optimizer == "adafactor":
        parts.append("adafactor")
    return "+".join(parts) or None


def row_fits(row: Any) -> bool:
    fits = getattr(row, "fits", None)
    return bool(fits) if isinstance(fits, bool) else getattr(row, "status", None) in ("fits", "tight")


def _at(row: Any, batch: int) -> Tuple[int, str]:
    """(the (micro-)batch the row analysed, how to say it)."""
    changes: Mapping[str, Any] = getattr(row, "changes", None) or {}
    micro = changes.get("batch_size")
    if isinstance(micro, int) and "grad_accum" in changes:
        return micro, f"micro-batch {micro} × {changes['grad_accum']} accumulated"
    return batch, f"batch {batch}"


def figure_text(lever: str, row: Any, batch: int) -> str:
    """ "gradient checkpointing: peak 31.20 GiB → fits at batch 8 (up to 24)": the row's peak, whether the analysed
    (micro-)batch fits with the lever, and the largest that does."""
    analysed, where = _at(row, batch)
    status = getattr(row, "status", "unknown")
    line = f"{lever}: peak {human(row.peak_bytes)}"
    if status not in _STATUS_WORDS:
        return line + f" at {where} (no memory limit known to compare with)"
    line += f" → {_STATUS_WORDS[status]} at {where}"
    maximum = getattr(row, "maximum", None)
    if maximum == 0:
        return line + " (not even 1 fits)"
    if isinstance(maximum, int):
        line += f" (up to {maximum})" if maximum >= analysed else f" (at most {maximum})"
    return line


def step_figures(found: FitAdvice) -> List[Tuple[str, StepFigure]]:
    """(step id, figure) for each advice row with a step, in the advice's order (cheapest lever first)."""
    figures: List[Tuple[str, StepFigure]] = []
    for row in getattr(found.advice, "rows", ()):
        key = row_key(row)
        step = STEP_OF_KEY.get(key or "")
        if key is None or step is None or any(step == s for s, _ in figures):
            continue
        if not isinstance(getattr(row, "peak_bytes", None), int):  # a row without a traced peak has no figure
            continue
        lever = str(getattr(row, "lever", key))
        allocated = getattr(row, "peak_allocated_bytes", None)
        figures.append(
            (
                step,
                StepFigure(
                    key=key,
                    flags=str(getattr(row, "flags", "")),
                    batch=_at(row, found.batch)[0],
                    peak_bytes=int(row.peak_bytes),
                    peak_allocated_bytes=allocated if isinstance(allocated, int) else None,
                    maximum=row.maximum if isinstance(row.maximum, int) else None,
                    status=str(getattr(row, "status", "unknown")),
                    fits=row_fits(row),
                    source=found.source,
                    text=figure_text(lever, row, found.batch),
                ),
            )
        )
    return figures


def cheapest_fitting(
    found: FitAdvice, figures: Sequence[Tuple[str, StepFigure]], applicable: Sequence[str]
) -> Optional[str]:
    """The step to take first among `applicable`: the advice's own pick (`recommended`, the cheapest change that
    fits) when it is one step's lever, else the first lever that fits in the advice's order (cheapest first)."""
    shown = {step for step, _ in figures}
    rows = list(getattr(found.advice, "rows", ()))
    pick = getattr(found.advice, "recommended", None)
    if isinstance(pick, int) and 0 <= pick < len(rows) and row_fits(rows[pick]):
        step = STEP_OF_KEY.get(row_key(rows[pick]) or "")
        if step in shown and step in applicable:
            return step
    return next((step for step, figure in figures if figure.fits and step in applicable), None)


def _small(model: Any) -> bool:
    count = parameter_count(model)
    if count is None or count > SMALL_MODEL_PARAMETERS:
        return False
    try:
        modules = sum(1 for _ in itertools.islice(model.modules(), SMALL_MODEL_MODULES + 1))
    except Exception:  # a model whose modules() raises is not analysed here
        return False
    return modules <= SMALL_MODEL_MODULES


def _memory(info: OomInfo) -> Optional[int]:
    """The memory the failed process could use: the GPU's capacity, or its per-process limit when lower."""
    known = [v for v in (info.total_capacity, info.allowed) if v]
    return min(known) if known else None


def _amp(d: Diagnosis) -> Optional[str]:
    """The user's mixed precision as far as the namespace tells (a GradScaler or a half-precision model)."""
    if d.amp != "likely":
        return None
    return "bf16" if d.bf16_supported else "fp16"


# What computes the advice: `advise(model, **request_fields)` -> analysis.Advice. The loaded extension hands in
# the magic's own (magics.analysis.fit_advice): the analysis imports this package, so it is passed in, not imported.
Advise = Callable[..., Any]


def request_fields(batch: int, info: OomInfo, d: Diagnosis) -> Dict[str, Any]:
    """The analysis request for the failed model: `batch` within the memory the error names, with the user's
    mixed precision, as `%gpumem analyze <model> -b <batch> --memory <bytes> [--amp …] --advise` asks it."""
    return {"batch_size": batch, "memory": _memory(info), "amp": _amp(d)}


class AdviceOverBudget(Exception):
    """The advice took longer than INLINE_SECONDS: the error's checklist does not wait for it."""


def budget(seconds: float) -> Callable[[Any], None]:
    """The request's on_progress that stops the analysis once `seconds` have passed."""
    start = time.perf_counter()

    def heard(_update: Any) -> None:
        if time.perf_counter() - start > seconds:
            raise AdviceOverBudget(f"the fit advice took over {seconds:g} s")

    return heard


def fit_advice_step(failed: FailedModel, batch: int, info: OomInfo) -> Optional[Step]:
    """The step whose cell computes the advice (a model too large to analyse while the error is shown)."""
    if not failed.name.isidentifier():
        return None
    memory = _memory(info)
    line = f"%gpumem analyze {failed.name} -b {batch}" + (f" --memory {memory}" if memory else "") + " --advise"
    return Step(
        FIT_ADVICE_STEP,
        "Compute what makes it fit",
        f"Traces `{failed.name}` at batch {batch} with each lever (mixed precision, checkpointing, a smaller "
        "micro-batch, an 8-bit optimizer) and shows each one's peak and the largest batch it allows. It runs "
        "on copies on the CPU: run the inserted cell when you are ready (a large model takes a while); the next "
        "out-of-memory error's checklist then shows the figures on these steps.",
        "insert-cell",
        code=line,
    )


def find_advice(
    analyzed: Optional[AnalyzedModel],
    failed: Optional[FailedModel],
    batch: Optional[int],
    info: OomInfo,
    d: Diagnosis,
    compute: Optional[Advise],
) -> Tuple[Optional[FitAdvice], Optional[Step]]:
    """(the advice for the failed model, or None; else the step that computes it, or None). The last analysis'
    advice when it is for this model; else computed now by `compute` for a small model; else the step. The
    analysis works on copies: the user's model stays as it is."""
    if failed is None or info.family not in ADVISED_FAMILIES:
        return None, None
    if (
        analyzed is not None
        and analyzed.advice is not None
        and analyzed.is_for(failed.value, parameter_count(failed.value))
    ):
        return FitAdvice(analyzed.advice, analyzed.batch or batch or 1, "last-analysis"), None
    if not batch:
        return None, None
    if compute is not None and _small(failed.value):
        fields = {**request_fields(batch, info, d), "on_progress": budget(INLINE_SECONDS)}
        try:
            return FitAdvice(compute(failed.value, **fields), batch, "computed"), None
        except AdviceOverBudget:
            pass  # the step below runs it when the user is ready
        except Exception:  # a model the analysis cannot trace gets no figures; the checklist stays as it was
            return None, None
    return None, fit_advice_step(failed, batch, info)


def eight_bit_step(d: Diagnosis) -> Step:
    """The 8-bit optimizer, shown only with its figure (the advice computed it for this model)."""
    n = d.names
    code = (
        "# Optimizer state in 8 bits (bitsandbytes, block-wise): about a quarter of AdamW's 32-bit state.\n"
        "# pip install bitsandbytes   (it runs on the GPU)\n"
        "import bitsandbytes as bnb\n\n"
        f'{n.optimizer} = bnb.optim.AdamW8bit({n.model}.parameters(), lr={n.optimizer}.param_groups[0]["lr"])\n'
    )
    return Step(
        EIGHT_BIT_STEP,
        "Use an 8-bit optimizer",
        "Adam's two states per parameter in 8 bits instead of 32: the optimizer state shrinks to about a quarter.",
        "insert-cell",
        code=code,
    )
