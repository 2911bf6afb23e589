"""Which model the last `%gpumem analyze` / `recommend` was for, and which model an out-of-memory error failed in:
the checklist's "reduce the batch size to N" uses an analysis's pick only for the model it analysed.

An analysis is for the failed model when it is the same object (held weakly: the user's model is never kept alive
by this record), or the same class with the same parameter count (the model built again, or analysed by name).
The failed model is the one the error's traceback runs through (a module's `forward` frame, or a frame that has
the model in its locals); with no model in the traceback, the only model in the namespace, if there is one.
Nothing here imports torch.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from gpumem_kernel.probe.holders import TorchKinds, traceback_frames
from gpumem_kernel.probe.inspection import type_name

_FRAME_LOCALS_READ = 64  # locals read per traceback frame: a frame with more is read in part
_SUBMODULES_READ = 20_000  # a model's modules looked through for one of the traceback's modules


@dataclass(frozen=True)
class AnalyzedModel:
    """What the last analysis was for, and its pick."""

    recommended: Optional[int]  # the `recommended` batch, or None (no device limit, …)
    type_name: str  # the model's class name
    parameters: Optional[int]  # its parameter count as the analysis read it
    ref: Optional[Callable[[], Any]] = None  # a weak reference to the model object; None for a model by name
    advice: Any = None  # its fit advice (analysis.Advice) when it was analysed with --advise; None: not computed
    batch: Optional[int] = None  # the batch it analysed (the advice's rows are at this batch)

    @classmethod
    def of(cls, model: Any, report: Any, advice: Any = None) -> "AnalyzedModel":
        """The record of `report` (analysis.AnalysisReport) for `model` (None when analysed by name), with the
        fit advice computed with it (`advice`, analysis.advise), if any."""
        ref: Optional[Callable[[], Any]] = None
        if model is not None:
            try:
                ref = weakref.ref(model)
            except TypeError:  # a model without weak references is matched by class and parameter count
                ref = None
        name = type_name(type(model)) if model is not None else str(getattr(report, "model_name", "") or "")
        count = getattr(report, "parameter_count", None)
        recommended = getattr(getattr(report, "recommendations", None), "recommended", None)
        batch = getattr(getattr(getattr(report, "recommendations", None), "current", None), "batch_size", None)
        return cls(
            recommended,
            name,
            count if isinstance(count, int) else None,
            ref,
            advice,
            batch if isinstance(batch, int) else None,
        )

    def is_for(self, model: Any, parameters: Optional[int]) -> bool:
        """Whether this analysis is for `model` (whose parameter count is `parameters`)."""
        if self.ref is not None and self.ref() is model:
            return True
        return (
            self.parameters is not None and parameters == self.parameters and type_name(type(model)) == self.type_name
        )


@dataclass(frozen=True)
class FailedModel:
    """The model an out-of-memory error failed in, as the namespace names it (or the traceback frame's local)."""

    name: str
    value: Any
    from_traceback: bool  # False: the namespace's only model, the traceback showing none


def traceback_modules(tb: Any, kinds: Optional[TorchKinds]) -> List[Any]:
    """The modules the traceback's frames hold (`self` of a forward, a local model), outermost first."""
    if tb is None or kinds is None or kinds.module is None:
        return []
    found: List[Any] = []
    seen: set = set()
    for frame in traceback_frames([tb]):
        try:
            if frame.f_locals is frame.f_globals:  # a cell's or module's frame: its locals are every global
                continue
            values = list(frame.f_locals.values())[:_FRAME_LOCALS_READ]
        except Exception:  # a frame whose locals cannot be read says nothing
            continue
        for value in values:
            if issubclass(type(value), kinds.module) and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
    return found


def _contains(model: Any, modules: Sequence[Any]) -> bool:
    """Whether `model` is one of `modules` or has one of them among its submodules."""
    ids = {id(m) for m in modules}
    if id(model) in ids:
        return True
    try:
        for count, sub in enumerate(model.modules()):
            if count >= _SUBMODULES_READ:
                return False
            if id(sub) in ids:
                return True
    except Exception:  # a model whose modules() raises is not the one found
        return False
    return False


def failed_model(namespace: Iterable[Tuple[str, Any]], tb: Any, kinds: Optional[TorchKinds]) -> Optional[FailedModel]:
    """The model the error failed in: the namespace model the traceback runs through (the largest container of
    the traceback's modules wins when several do); a traceback module not in the namespace under the frame's
    own name; with no module in the traceback, the namespace's only model; else None (nothing says which)."""
    models = list(namespace)
    modules = traceback_modules(tb, kinds)
    if modules:
        containing = [(name, value) for name, value in models if _contains(value, modules)]
        if containing:  # the whole model rather than a part of it the namespace also names
            name, value = max(containing, key=lambda item: parameter_count(item[1]) or 0)
            return FailedModel(name, value, True)
        outer = modules[0]
        return FailedModel(_local_name(tb, outer) or type_name(type(outer)), outer, True)
    if len({id(value) for _, value in models}) == 1:
        name, value = models[0]
        return FailedModel(name, value, False)
    return None


def _local_name(tb: Any, value: Any) -> Optional[str]:
    """The name a traceback frame gives `value` (the first frame that holds it)."""
    for frame in traceback_frames([tb]):
        try:
            for name, local in list(frame.f_locals.items())[:_FRAME_LOCALS_READ]:
                if local is value:
                    return str(name)
        except Exception:
            continue
    return None


def parameter_count(model: Any) -> Optional[int]:
    try:
        return int(sum(p.numel() for p in model.parameters()))
    except Exception:  # a model whose parameters() raises has no count to match
        return None


@dataclass(frozen=True)
class BatchPick:
    """The analysis's pick for the failed model, or what it takes to compute one."""

    recommended: Optional[int]  # the analysis's `recommended` batch for this model; None: no analysis for it
    hint: Optional[str]  # with no analysis for it: the magic that computes one


def batch_pick(analyzed: Optional[AnalyzedModel], failed: Optional[FailedModel], batch: Optional[int]) -> BatchPick:
    """The last analysis's pick when it is for the model that failed; else the `%gpumem analyze` line that
    would compute the batch size that fits it (another model's number is never offered)."""
    if analyzed is not None and failed is not None and analyzed.is_for(failed.value, parameter_count(failed.value)):
        return BatchPick(analyzed.recommended, None)
    name = failed.name if failed is not None and failed.name.isidentifier() else "<model variable>"
    line = f"%gpumem analyze {name}" + (f" --batch {batch}" if batch else "")
    return BatchPick(None, f"Run `{line}` to compute the batch size that fits this model.")
