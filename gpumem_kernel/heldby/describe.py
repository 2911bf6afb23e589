"""One line per holder, in the user's terms: `model: Linear, 1.2M params`, `losses: list of 40 tensors with
grad history`. Read from the object while the walk has it; only the string is kept."""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple

from gpumem_kernel.heldby.walk import Reach
from gpumem_kernel.probe.holders import TorchKinds, kind_of
from gpumem_kernel.probe.inspection import type_name
from gpumem_kernel.render.units import human


def count(n: int) -> str:
    """12 → "12", 1_234_567 → "1.2M", 1.1e9 → "1.1B"."""
    for factor, suffix in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= factor:
            return f"{n / factor:.1f}{suffix}"
    return str(n)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _history(reach: Reach) -> str:
    if reach.with_history and reach.with_history == reach.tensors:
        return " with grad history"
    return f" ({reach.with_history} with grad history)" if reach.with_history else ""


def _tensor(tensor: Any, reach: Reach) -> str:
    shape = "×".join(str(int(n)) for n in tensor.shape) or "scalar"
    parts = [f"tensor {str(tensor.dtype).replace('torch.', '')} [{shape}] on {tensor.device}"]
    if tensor.grad_fn is not None:
        parts.append("grad history")
    if reach.gradients:
        parts.append("its .grad")
    return ", ".join(parts)


def _module(module: Any, reach: Reach) -> str:
    parameters = sum(int(p.numel()) for p in module.parameters())
    text = f"{type_name(type(module))}, {count(parameters)} params"
    return text + (", gradients" if reach.gradients else "")


def _optimizer(optimizer: Any) -> str:
    state = [s for s in list(optimizer.state.values()) if s]
    return f"{type_name(type(optimizer))}, state for {_plural(len(state), 'parameter')}"


def _container(obj: Any, kind: str, reach: Reach) -> str:
    size = len(obj)
    if size == reach.tensors:
        return f"{kind} of {_plural(size, 'tensor')}{_history(reach)}"
    return f"{kind} of {_plural(size, 'item')} reaching {_plural(reach.tensors, 'tensor')}{_history(reach)}"


def value(obj: Any, reach: Reach, kinds: TorchKinds) -> str:
    """What a variable is and what it holds; a fallback line if reading the object fails."""
    try:
        kind = kind_of(obj, kinds)
        if kind == "tensor":
            return _tensor(obj, reach)
        if kind == "module":
            return _module(obj, reach)
        if kind == "optimizer":
            return _optimizer(obj)
        if kind in ("dict", "list", "tuple", "set"):
            return _container(obj, type_name(type(obj)) if kind == "list" else kind, reach)  # a deque says so
        what = "dataclass " if dataclasses.is_dataclass(type(obj)) else ""
        return f"{what}{type_name(type(obj))} reaching {_plural(reach.tensors, 'tensor')}{_history(reach)}"
    except Exception:  # a user class whose len() or shape raises: the walk's counts still say enough
        return f"{type_name(type(obj))} reaching {_plural(reach.tensors, 'tensor')}"


def output_cache(labels: Sequence[str], reach: Reach) -> str:
    shown = ", ".join(labels[:6]) + (f" and {len(labels) - 6} more" if len(labels) > 6 else "")
    return f"IPython's output cache ({shown}): `del` of a variable does not free these; %gpumem clear does"


def traceback(functions: Sequence[str], reach: Reach) -> str:
    names = ", ".join(dict.fromkeys(functions))
    return f"locals of the last error's frames ({names}): %gpumem clear drops them"


def graph_note(graph_bytes: int) -> str:
    """What a holder keeps alive through its autograd graphs, as the end of its description ("" for none)."""
    if graph_bytes <= 0:
        return ""
    return f"; keeps {human(graph_bytes)} alive through autograd graphs — store `loss.item()` or `t.detach()`"


def history_hint(roots: List[Tuple[str, Reach]]) -> Optional[str]:
    """Tensors with grad history keep their autograd graph's saved activations alive, which no variable reaches
    by name: say which variables do, and the usual fix."""
    keeping = [name for name, reach in roots if reach.with_history]
    if not keeping:
        return None
    names = ", ".join(f"`{name}`" for name in keeping[:4]) + (" …" if len(keeping) > 4 else "")
    verb = "keeps" if len(keeping) == 1 else "keep"
    return (
        f"{names} {verb} autograd graphs: their saved tensors are in the remainder "
        "(store loss.item() or t.detach() instead)"
    )
