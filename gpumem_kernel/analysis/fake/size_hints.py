"""Sizes that depend on tensor values, for a fake trace: a stated default per operator, or the user's hint.

A detector's target assignment (nonzero, boolean masks, unique with counts) makes tensors whose size depends on
the data. FakeTensorMode has no values, so without a ShapeEnv it raises DynamicOutputShapeException for such an
op, and DataDependentOutputException when Python reads a value (`counts.max()` used as a size, `.item()`).

Why concrete sizes and not FakeTensorMode's unbacked SymInts: with a ShapeEnv, nonzero returns a tensor of size
u0, but on torch 2.13 such a tensor cannot even say its `nbytes` ("Cannot call numel() on tensor with symbolic
sizes/strides"): the storage tracker, the allocator replay and every library branch on a size (`if n == 0`)
would need symbolic arithmetic and a guard answer each, and libraries raise GuardOnDataDependentSymNode where
they compare. Resolving u0 afterwards would not give the tracker the sizes it needs while the step runs. So each
op is answered here at once with a plain size from its rule, and everything downstream is an ordinary fake tensor.

The rules (`size_hints=` lowers the defaults, which are upper bounds on memory):
- select (nonzero, masked_select, indexing or assigning with a boolean mask): a fraction of the elements is
  selected; default 1.0, every element. An assignment `x[mask] = values` takes as many as the values given.
  Neither default nor hint exceeds a bound the step itself shows, the smaller one taken and named in the note:
  the elements set in the mask where the trace saw it made (a sampler's k indices written into zeros, `pos | neg`;
  analysis.fake.mask_counts), or a cap the model declares on that line, read from its settings (Mask R-CNN's sampled
  positives per image; analysis.fake.library_reads.select_cap). A later slice or topk keeps its own k (a detector's
  post_nms_top_n, detections_per_img): its size is exact whatever the select took.
- unique (_unique2, _unique, unique_dim, unique_consecutive): a fraction of the elements is distinct, the counts
  spread evenly over them; default: every element distinct (the sizes' bound) and each count as large as all
  elements (a count read as a size, e.g. a detector's most targets per image: that read's bound).
- repeat (repeat_interleave with a tensor of repeats): the mean repeat; default 1 (not a bound: none exists).
- nms (torchvision's): the boxes kept are a selection; default every box (the model keeps its own top n after).
- a boolean mask's count of True (mask.sum(), count_nonzero(), per row with a dim) is a value, not a size: it is
  the select rule's count, so a read of it (a loss's `num_pos.item()`, lengths from a padding mask) is answered.
Other ops whose size depends on values (bincount, ...) keep the trace's one-line refusal, except a library's
input check that only raises, answered as a valid batch does (analysis.fake.library_reads).

Values: the outputs a rule fixes (counts, inverse indices, nonzero's coordinates) keep real values, so do integer
and boolean tensors made by fills (ones, zeros, full: an attention mask built in a batch function) and real tensors
(a sample batch's attention mask), and an op whose tensor inputs all have values runs on them too, so a Python read
derived only from these (`counts.to(int32).max()` as a size, transformers' `padding_mask.all()`) is answered; any
other read keeps the one-line refusal.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from gpumem_kernel.analysis.fake.library_reads import select_cap, valid_batch_answer
from gpumem_kernel.analysis.fake.mask_counts import MaskCounts
from gpumem_kernel.analysis.fake.value_reads import OUTSIDE, short_path

SizeHintsArg = Union[None, float, int, Mapping[str, float]]

# the names a user may give, by rule (a location "file.py:NN" as the notes print it is a key too)
_ALIASES = {
    "select": "select",
    "nonzero": "select",
    "masked_select": "select",
    "index": "select",
    "mask": "select",
    "nms": "select",
    "unique": "unique",
    "repeat": "repeat",
    "repeat_interleave": "repeat",
}
_FRACTIONS = ("select", "unique")
VALUES_LIMIT = 1 << 20  # elements: larger outputs keep no values (a read from them is refused)


def check(size_hints: SizeHintsArg) -> Optional[Dict[str, float]]:
    """The user's hints by rule or location, or None (the defaults); ValueError with one line when malformed."""
    if size_hints is None:
        return None
    if isinstance(size_hints, (int, float)) and not isinstance(size_hints, bool):
        return {rule: _fraction(size_hints, "size_hints") for rule in _FRACTIONS}
    if not isinstance(size_hints, Mapping):
        raise ValueError("size_hints: a fraction (0.1: 10 % selected or distinct) or a dict {op or file:line: value}")
    hints: Dict[str, float] = {}
    for key, value in size_hints.items():
        rule = _ALIASES.get(str(key))
        if rule is None and ":" not in str(key):
            raise ValueError(f"size_hints: unknown key {key!r} (select, unique, repeat, or a location file.py:NN)")
        label = f"size_hints[{key!r}]"
        hints[rule or str(key)] = _fraction(value, label) if rule in _FRACTIONS else _non_negative(value, label)
    return hints


def _non_negative(value: Any, label: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{label} must be a number >= 0, got {value!r}")
    return float(value)


def _fraction(value: Any, label: str) -> float:
    number = _non_negative(value, label)
    if number > 1:
        raise ValueError(f"{label} must be a fraction in [0, 1], got {value!r}")
    return number


def _user_frame() -> Any:
    """The innermost frame outside torch and this package (the line that asked), or None."""
    frame: Any = sys._getframe(1)
    while frame is not None and any(p in frame.f_code.co_filename for p in OUTSIDE):
        frame = frame.f_back
    return frame


def _location(frame: Any) -> str:
    """'file.py:NN' of a frame (the line that asked), '?' for None."""
    return f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else "?"


def _user_location() -> str:
    return _location(_user_frame())


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g} %"


class SizeHints:
    """One fake trace's answers: sizes from the rules, values kept for the outputs a rule fixes, notes."""

    def __init__(self, hints: Optional[Dict[str, float]]) -> None:
        from torch.utils.weak import WeakTensorKeyDictionary

        self.hints = hints or {}
        self.values: Any = WeakTensorKeyDictionary()  # fake tensor -> its real values
        self.masks = MaskCounts()  # at most how many elements of a mask are set, where the trace saw it made
        self._notes: Dict[Tuple[str, str], str] = {}

    def notes(self) -> List[str]:
        return list(self._notes.values())

    # --- dispatch (the tracker's __torch_dispatch__ calls this instead of func) ----------------------------

    def dispatch(self, func: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

        if (len(self.values) or _real_tensor_in(args)) and self._all_known(args, kwargs):
            out = self._on_values(func, args, kwargs)
            self.masks.see(func, args, kwargs, out)
            return out
        try:
            out = func(*args, **kwargs)
        except DynamicOutputShapeException:
            rule = _RULES.get(func.overloadpacket.__name__)
            if rule is None:
                raise
            out = rule(self, func, list(args), kwargs)
            self.masks.see(func, args, kwargs, out)
            return out
        except DataDependentOutputException:
            frame = _user_frame()
            answer = None if frame is None else valid_batch_answer(frame, short_path)
            if answer is None:
                raise
            return answer
        if len(self.values):
            self._forget_written(func, args, kwargs)
        self.masks.see(func, args, kwargs, out)
        name = func.overloadpacket.__name__
        if name in _COUNTS:
            self._count(func, args[0], out)
        elif name in _FILLS:
            self._filled(name, args, kwargs, out)
        return out

    def real_values(self, fake: Any) -> Any:
        """The values the trace kept for a fake tensor (a real tensor is its own), None when it kept none."""
        return self._real(fake) if self._known(fake) else None

    def note(self, op: str, where: str, text: str) -> None:
        """A note of the trace's, once per (op, where) (analysis.fake.attention_path's unknown masks)."""
        self._note(op, where, text)

    def _filled(self, name: str, args: Sequence[Any], kwargs: Dict[str, Any], out: Any) -> None:
        """An integer or boolean tensor made by a fill (ones, zeros, full, their _like and new_ forms) keeps the
        values it was made with: an attention mask of ones built in a batch function, read by transformers to
        decide its attention path (analysis.fake.attention_path)."""
        import torch

        if not isinstance(out, torch.Tensor) or out.is_floating_point() or out.is_complex():
            return
        if out.numel() > VALUES_LIMIT:
            return
        if "ones" in name:
            value: Any = 1
        elif "zeros" in name:
            value = 0
        else:  # full(size, value), full_like(self, value), new_full(self, size, value)
            at = 2 if name == "new_full" else 1
            value = args[at] if len(args) > at else kwargs.get("fill_value")
        if not isinstance(value, (bool, int)):
            return
        # made when an op reads them: most fills are never read (a bitsandbytes optimizer's uint8 state, thousands
        # of buffers), and making each real at once cost more than the trace of the step
        self.values[out] = Fill(tuple(out.shape), value, out.dtype)

    def _known(self, value: Any) -> bool:
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(value, FakeTensor):
            return True  # a real tensor (allow_non_fake_inputs) has its values
        return value.constant is not None or value in self.values

    def _all_known(self, args: Any, kwargs: Any) -> bool:
        import torch
        from torch.utils._pytree import tree_leaves

        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        return bool(tensors) and all(self._known(t) for t in tensors)

    def _real(self, value: Any) -> Any:
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(value, FakeTensor):
            return value
        if value.constant is not None:
            return value.constant
        real = self.values[value]
        if isinstance(real, Fill):
            real = self.values[value] = _real_values(real.make)
        return real

    def _on_values(self, func: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        """Every tensor input has values: the op runs on them too (exact), and a read gets its answer."""
        import torch
        from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
        from torch.utils._pytree import tree_leaves, tree_map_only
        from torch.utils._python_dispatch import _disable_current_modes

        real_args, real_kwargs = tree_map_only(torch.Tensor, self._real, (tuple(args), kwargs))
        if real_kwargs.get("device") is not None:  # `mask.to("cuda")`: values stay on the CPU, no GPU is touched
            real_kwargs = {**real_kwargs, "device": torch.device("cpu")}
        with _disable_current_modes():
            real_out = func(*real_args, **real_kwargs)
        try:
            out = func(*args, **kwargs)
        except (DynamicOutputShapeException, DataDependentOutputException):
            out = tree_map_only(torch.Tensor, _fake_like, real_out)
        for fake, real in zip(tree_leaves(out), tree_leaves(real_out)):
            self._keep(fake, real)
        return out

    def _keep(self, fake: Any, real: Any) -> None:
        import torch

        if isinstance(fake, torch.Tensor) and isinstance(real, torch.Tensor) and real.numel() <= VALUES_LIMIT:
            self.values[fake] = real

    def _forget_written(self, func: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        """An op that writes into a tensor with values from one without: those values are stale."""
        import torch

        if not func._schema.is_mutable:
            return
        for i, argument in enumerate(func._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = args[i] if i < len(args) else kwargs.get(argument.name)
            if isinstance(value, torch.Tensor) and value in self.values:
                del self.values[value]

    def _count(self, func: Any, x: Any, out: Any) -> None:
        """A boolean mask's counts of True (mask.sum(), count_nonzero(), per row with a dim) have the select rule's
        values, so that a read of them (a loss normalised by its positives, `mask.sum().item()`; lengths from a
        padding mask, `mask.sum(-1).tolist()`) gets what the selections of that mask take."""
        import torch

        if x.dtype != torch.bool or not 0 < out.numel() <= VALUES_LIMIT or x.numel() % out.numel():
            return
        op = f"aten.{func.overloadpacket.__name__} (count of a boolean mask)"
        k = self.selected(op, x.numel() // out.numel(), bound=self.masks.bound(x))
        self.values[out] = Fill(tuple(out.shape), k, out.dtype)

    # --- the rules ------------------------------------------------------------------------------------------

    def _hint(self, rule: str, where: str) -> Optional[float]:
        for key, value in self.hints.items():
            if ":" in key and where.endswith(key):
                return value
        return self.hints.get(rule)

    def _note(self, op: str, where: str, text: str) -> None:
        self._notes.setdefault((op, where), f"{op} at {where}: {text}")

    def selected(self, op: str, n: int, given: Optional[int] = None, bound: Optional[int] = None) -> int:
        """How many of n elements a selection keeps: `given` (the values assigned), else the hint or all, at most
        `bound` (the elements written into the mask, analysis.fake.mask_counts) and the model's own cap on this line
        (analysis.fake.library_reads.select_cap), the bound used named in the note."""
        frame = _user_frame()
        where = _location(frame)
        if given is not None:
            self._note(op, where, "as many as the values assigned")
            return given
        fraction = self._hint("select", where)
        k = n if fraction is None else min(n, math.ceil(fraction * n - 1e-9))
        chosen = "every element selected (default, an upper bound; size_hints=0.1 for 10 %)"
        if fraction is not None:
            chosen = f"{_percent(fraction)} of the elements selected (size_hints)"
        caps = [] if bound is None else [(bound, "the elements set in the mask it selects from (as the trace made it)")]
        library = select_cap(frame, short_path) if frame is not None else None
        caps += [] if library is None else [library]
        cap, text = min(caps, default=(k, ""))
        if cap < k:
            below = "" if fraction is None else f", below size_hints' {k}"
            self._note(op, where, f"{cap} of {n} elements selected: at most {text} (an upper bound{below})")
            return cap
        self._note(op, where, chosen)
        return k

    def distinct(self, op: str, n: int) -> Tuple[int, List[int]]:
        """(distinct values, their counts) of n elements: the hint's fraction, counts spread evenly; default every
        element distinct, each count read as n (the bound of each, not one consistent outcome)."""
        where = _user_location()
        fraction = self._hint("unique", where)
        if fraction is None:
            self._note(
                op,
                where,
                "every element distinct and a count read as all elements (default, upper bounds; "
                "size_hints={'unique': 0.25}: a quarter distinct, 4 of each)",
            )
            return n, [n] * n
        k = min(n, max(1 if n else 0, math.ceil(fraction * n - 1e-9)))
        self._note(op, where, f"{_percent(fraction)} of the elements distinct, counts spread evenly (size_hints)")
        return k, [n // k + (1 if i < n % k else 0) for i in range(k)]

    def repeated(self, op: str, n: int) -> int:
        where = _user_location()
        mean = self._hint("repeat", where)
        if mean is None:
            self._note(op, where, "each element once (default, not a bound; size_hints={'repeat': 4} for 4 each)")
            return n
        self._note(op, where, f"each element {mean:g} times on average (size_hints)")
        return math.ceil(mean * n - 1e-9)


@dataclass(frozen=True)
class Fill:
    """The values of a tensor made by a fill, made real when first read."""

    shape: Tuple[int, ...]
    value: Union[bool, int]
    dtype: Any

    def make(self) -> Any:
        import torch

        return torch.full(self.shape, self.value, dtype=self.dtype)


def _fake_like(real: Any) -> Any:
    """An empty fake tensor (the current fake mode's) with real's shape, strides and dtype."""
    import torch

    return torch.empty_strided(real.shape, real.stride(), dtype=real.dtype, device=real.device)


def _real_values(make: Callable[[], Any]) -> Any:
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        return make()


def _nonzero_of(hints: SizeHints, x: Any, op: str) -> Any:
    """nonzero(x) with the hinted count: coordinates of the first k elements (valid indices) as its values."""
    import torch

    k = hints.selected(op, x.numel(), bound=hints.masks.bound(x))
    out = torch.empty_strided((k, x.dim()), (1, max(k, 1)), dtype=torch.long, device=x.device)
    if k * x.dim() <= VALUES_LIMIT:
        shape = tuple(x.shape)
        hints.values[out] = _real_values(lambda: torch.stack(torch.unravel_index(torch.arange(k), shape), 1))
    return out


def _nonzero(hints: SizeHints, func: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    return _nonzero_of(hints, args[0], "aten.nonzero")


def _nonzero_numpy(hints: SizeHints, func: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    return _nonzero_of(hints, args[0], "aten.nonzero").unbind(1)


def _masked_select(hints: SizeHints, func: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    import torch

    x, mask = args[0], args[1] if len(args) > 1 else kwargs["mask"]
    n = math.prod(torch.broadcast_shapes(x.shape, mask.shape))
    return x.new_empty((hints.selected("aten.masked_select", n, bound=hints.masks.bound(mask)),))


def _masks_as_indices(hints: SizeHints, indices: Sequence[Any], op: str, given: Optional[int]) -> List[Any]:
    """A boolean mask among the indices becomes the long coordinates of its hinted selection (as torch does)."""
    import torch

    out: List[Any] = []
    for index in indices:
        if index is not None and index.dtype in (torch.bool, torch.uint8):
            k = hints.selected(op, index.numel(), given, bound=hints.masks.bound(index))
            out += list(torch.empty((index.dim(), k), dtype=torch.long, device=index.device).unbind(0))
        else:
            out.append(index)
    return out


def _index(hints: SizeHints, func: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    args[1] = _masks_as_indices(hints, args[1], "aten.index.Tensor (boolean mask)", None)
    return func(*args, **kwargs)


def _assigned(x: Any, indices: Sequence[Any], values: Any) -> Optional[int]:
    """x[mask] = values with one mask: the values' length along the selection, where it is not broadcast."""
    if len(indices) != 1 or indices[0] is None:
        return None
    position = values.dim() - (x.dim() - indices[0].dim()) - 1
    if position < 0 or values.shape[position] == 1:
        return None
    return int(values.shape[position])


def _index_put(hints: SizeHints, func: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    given = _assigned(args[0], args[1], args[2])
    args[1] = _masks_as_indices(hints, args[1], f"aten.{func.overloadpacket.__name__} (boolean mask)", given)
    return func(*args, **kwargs)


def _unique(hints: SizeHints, func: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    """_unique2, _unique, unique_consecutive, unique_dim, unique_dim_consecutive: (values, inverse[, counts])."""
    import torch
    from torch.fx.operator_schemas import normalize_function

    name = func.overloadpacket.__name__
    options = normalize_function(func, tuple(args), kwargs, normalize_to_only_use_kwargs=True).kwargs
    x, dim = options["input"], options.get("dim")
    n = x.numel() if dim is None else x.shape[dim]
    k, counts = hints.distinct(f"aten.{name}", n)
    shape = (k,) if dim is None else tuple(x.shape[:dim]) + (k,) + tuple(x.shape[dim + 1 :])
    values = x.new_empty(shape)
    inverse_shape = tuple(x.shape) if dim is None else (n,)
    inverse = x.new_empty(inverse_shape if options.get("return_inverse") else (0,), dtype=torch.long)
    if name == "_unique":
        return values, inverse
    count = x.new_empty((k,) if options.get("return_counts") else (0,), dtype=torch.long)
    if options.get("return_counts") and k <= VALUES_LIMIT:
        hints.values[count] = _real_values(lambda: torch.tensor(counts, dtype=torch.long))
    if options.get("return_inverse") and n <= VALUES_LIMIT:
        # the default's counts are bounds, not a partition: its inverse is every element distinct
        groups = torch.tensor(counts if sum(counts) == n else [1] * k, dtype=torch.long)
        hints.values[inverse] = _real_values(
            lambda: torch.repeat_interleave(torch.arange(k), groups).reshape(inverse_shape)
        )
    return values, inverse, count


def _nms(hints: SizeHints, func: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    """torchvision's nms: the boxes kept, best first, as the select rule counts them (by default every box: the
    model then keeps its own top n, e.g. post_nms_top_n, detections_per_img); their indices as its values."""
    import torch

    boxes = args[0]
    k = hints.selected(f"{func.namespace}.nms (boxes kept)", boxes.shape[0])
    out = torch.empty((k,), dtype=torch.long, device=boxes.device)
    if k <= VALUES_LIMIT:
        hints.values[out] = _real_values(lambda: torch.arange(k))
    return out


def _repeat_interleave(hints: SizeHints, func: Any, args: List[Any], kwargs: Dict[str, Any]) -> Any:
    repeats = args[0]
    return repeats.new_empty((hints.repeated("aten.repeat_interleave", repeats.numel()),))


_Rule = Callable[[SizeHints, Any, List[Any], Dict[str, Any]], Any]
_RULES: Dict[str, _Rule] = {
    "nonzero": _nonzero,
    "nonzero_numpy": _nonzero_numpy,
    "masked_select": _masked_select,
    "index": _index,
    "index_put": _index_put,
    "index_put_": _index_put,
    "_index_put_impl_": _index_put,
    "_unique2": _unique,
    "_unique": _unique,
    "unique_dim": _unique,
    "unique_consecutive": _unique,
    "unique_dim_consecutive": _unique,
    "repeat_interleave": _repeat_interleave,
    "nms": _nms,
}
_COUNTS = frozenset({"sum", "count_nonzero"})
_FILLS = frozenset(
    {"ones", "zeros", "full", "ones_like", "zeros_like", "full_like", "new_ones", "new_zeros", "new_full"}
)


def _real_tensor_in(args: Sequence[Any]) -> bool:
    """A real tensor among the op's arguments (a sample batch's attention mask, kept real in a fake trace): its
    values are known, so the op runs on them too. The arguments' top level only: the check runs for every op."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    return any(isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor) for a in args)
