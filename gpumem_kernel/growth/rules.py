"""Why a cell grows memory each run: one classifier per known pattern, first match wins.

Each rule reads what the holders' walk found (the holders that grew since the last run, what each holds now)
and the cell's source, and names the fix. The patterns are the classic notebook leaks:
a loss kept with its autograd graph (`.item()`), outputs kept with their graphs (`with torch.no_grad()` for
evaluation, `.detach()` in training), IPython's output cache, and an object re-created while the old one is
still referenced (`del` it first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from gpumem_kernel.growth.report import GrowingHolder
from gpumem_kernel.heldby.report import OUT_ENTRY, HoldersReport

PATTERNS = ("loss_with_graph", "eval_with_graph", "outputs_with_graph", "output_cache", "kept_old_object")
_HISTORY = "grad history"  # what heldby.describe writes of tensors that keep their autograd graph
_SCALAR_BYTES = 8  # a 0-d tensor's storage: one float32/float64 (4/8 bytes)
_TRAINS = re.compile(r"\.backward\(|\.step\(|autograd\.grad\(")
_NO_GRAD = re.compile(r"no_grad|inference_mode|set_grad_enabled\(\s*False")
_ASSIGNED_CALL = re.compile(r"^[ \t]*([A-Za-z_]\w*)[ \t]*=[ \t]*[\w.]+\(", re.MULTILINE)
# what a cell adds to a container that outlives it: `name.append(`, `.extend(`, `name[key] =`, `name +=`
_KEEPS = re.compile(r"\b([A-Za-z_]\w*)(?:\.(?:append|extend|add|update|insert)\(|\[[^\]\n]*\][ \t]*=[^=]|[ \t]*\+=)")


@dataclass(frozen=True)
class Evidence:
    grown: Sequence[GrowingHolder]  # largest growth first
    step: int  # bytes each run leaves
    source: str  # the cell's code
    report: Optional[HoldersReport]  # the holders after this run, when walked


@dataclass(frozen=True)
class Finding:
    pattern: str  # one of PATTERNS
    fix: str


Rule = Callable[[Evidence], Optional[Finding]]


def _with_graph(evidence: Evidence) -> List[GrowingHolder]:
    return [h for h in evidence.grown if h.tensors > 0 and _HISTORY in h.description]


def loss_with_graph(evidence: Evidence) -> Optional[Finding]:
    """Scalars with grad history collected run after run: `losses.append(loss)`."""
    for holder in _with_graph(evidence):
        if holder.bytes <= holder.tensors * _SCALAR_BYTES:
            return Finding(
                "loss_with_graph",
                f"append `loss.item()` (a Python number) to `{holder.name}`, not the tensor: each tensor keeps "
                "its whole autograd graph, activations included",
            )
    return None


def eval_with_graph(evidence: Evidence) -> Optional[Finding]:
    """Outputs with grad history collected by a cell that never trains: evaluation without no_grad."""
    if _TRAINS.search(evidence.source) or _NO_GRAD.search(evidence.source):
        return None
    for holder in _with_graph(evidence):
        return Finding(
            "eval_with_graph",
            f"evaluate under `with torch.no_grad():` (or `torch.inference_mode()`): the outputs kept in "
            f"`{holder.name}` then hold no autograd graph",
        )
    return None


def outputs_with_graph(evidence: Evidence) -> Optional[Finding]:
    """Outputs with grad history collected in a training cell."""
    for holder in _with_graph(evidence):
        return Finding(
            "outputs_with_graph",
            f"append `.detach()` (or `.detach().cpu()`) to `{holder.name}`: the values without their autograd graph",
        )
    return None


def output_cache(evidence: Evidence) -> Optional[Finding]:
    """IPython's `Out` keeps every displayed result."""
    if any(h.name == OUT_ENTRY for h in evidence.grown):
        return Finding(
            "output_cache",
            "end the cell with `;` so that IPython does not keep its result in `Out` (`%gpumem clear` drops "
            "what `Out` holds now)",
        )
    return None


def kept_old_object(evidence: Evidence) -> Optional[Finding]:
    """The cell re-creates an object (a model) about as large as the step: the previous one is still
    referenced elsewhere (an optimizer, a list, a closure)."""
    if evidence.report is None:
        return None
    assigned = set(_ASSIGNED_CALL.findall(evidence.source))
    for entry in evidence.report.entries:
        if entry.name in assigned and 0.75 * evidence.step <= entry.reached_bytes <= 1.25 * evidence.step:
            return Finding(
                "kept_old_object",
                f"`del {entry.name}` (and whatever references it: its optimizer, a list) before creating it "
                "again, or create it once in another cell: each run leaves the previous one alive",
            )
    return None


RULES: Sequence[Rule] = (loss_with_graph, eval_with_graph, outputs_with_graph, output_cache, kept_old_object)


def host_fix(source: str) -> Optional[str]:
    """For a cell that grows the kernel's RSS: the container its code adds to, and what to keep instead; None
    when the code names none (no pattern is claimed: the holders' walk looks at device memory only)."""
    names = list(dict.fromkeys(_KEEPS.findall(source)))
    if not names:
        return None
    kept = ", ".join(f"`{name}`" for name in names[:3])
    return (
        f"{kept} keeps what every run adds in host memory (numpy arrays, CPU tensors): keep a summary "
        "(`.item()`, a running mean) or only the last items, or empty it (`.clear()`) before running the cell again"
    )


def classify(evidence: Evidence, rules: Sequence[Rule] = RULES) -> Optional[Finding]:
    for rule in rules:
        finding = rule(evidence)
        if finding is not None:
            return finding
    return None
