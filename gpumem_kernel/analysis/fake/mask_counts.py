"""How many elements of a mask can be set, as the fake trace saw the mask made: the bound a later select (nonzero,
`torch.where(mask)`, boolean indexing, `mask.sum()`) takes instead of "every element" (analysis.fake.size_hints).

A sampler that keeps k of n candidates writes k ones into a zero mask and selects from it later (torchvision's
BalancedPositiveNegativeSampler: `mask = zeros_like(matched); mask[positive[perm[:k]]] = 1`, then the RPN's and
roi_heads' `torch.where(pos_mask | neg_mask)`): that select keeps at most the k written, whatever the data. Without
this the select takes every element of the mask, and a detector's box and mask heads run on every proposal
instead of the sampler's batch_size_per_image.

The rules, each an upper bound on the elements that are not zero:
- made as zeros (zeros, zeros_like, new_zeros, full and fill_ with 0, zero_): none;
- index_put_ / index_put with values that are not a known zero: as many more as the positions written; so
  index_fill_ / index_fill (its index along one dimension, times the other dimensions): torch 2.15 runs
  `mask[idx] = 1` (one index tensor, a Python scalar) as index_fill_ where 2.13 ran lift_fresh and index_put_;
- or (bitwise_or, logical_or) and cat: the sum; and (bitwise_and, logical_and, mul): the smaller;
- a copy or a view (_to_copy, clone, view, ...): the same; a comparison with a scalar that is false at zero
  (x > 0, x != 0, x == 3): at most x's;
- any other write into a tensor with a bound, or into its storage through a view, forgets the bounds of every
  tensor on that storage (an unknown write can set any element).

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, Optional, Sequence, Tuple

_ZEROS = frozenset({"zeros", "zeros_like", "new_zeros"})
_FILLED = frozenset({"full", "full_like", "new_full", "fill_"})  # a fill value: zeros when it is 0
_MAKERS = _ZEROS | _FILLED | {"zero_"}
_WRITES = frozenset({"index_put_", "index_put", "_index_put_impl_"})
_FILLS = frozenset({"index_fill_", "index_fill"})  # index_fill(x, dim, index, value)
_SUMS = frozenset({"bitwise_or", "logical_or", "cat"})
_SMALLER = frozenset({"bitwise_and", "logical_and", "mul"})
_SAME = frozenset(
    {"_to_copy", "clone", "detach", "alias", "view", "_unsafe_view", "reshape", "_reshape_alias", "squeeze"}
    | {"unsqueeze", "flatten", "contiguous", "t", "permute", "transpose", "select", "slice", "narrow"}
)


def _false_at_zero(name: str, scalar: Any) -> bool:
    """x <op> scalar is False where x is 0: True only where x is not zero."""
    if isinstance(scalar, bool) or not isinstance(scalar, (int, float)):
        return False
    return {
        "eq": scalar != 0,
        "ne": scalar == 0,
        "gt": scalar >= 0,
        "lt": scalar <= 0,
        "ge": scalar > 0,
        "le": scalar < 0,
    }.get(name, False)


@functools.lru_cache(maxsize=None)
def _written_arguments(func: Any) -> Tuple[int, ...]:
    """Positions of the arguments an op writes into (empty for a functional op)."""
    if not func._schema.is_mutable:
        return ()
    return tuple(i for i, a in enumerate(func._schema.arguments) if a.alias_info is not None and a.alias_info.is_write)


def _storage(x: Any) -> Any:
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(x.untyped_storage())


def _known_zero(value: Any) -> bool:
    """A value written that is known to be 0 (a Python 0, or a constant tensor of zeros)."""
    import torch

    if isinstance(value, torch.Tensor):
        constant = getattr(value, "constant", None)
        return constant is not None and not bool(constant.any())
    return value == 0


def _positions(x: Any, indices: Sequence[Any]) -> int:
    """Elements `x[indices] = values` writes: the indices' broadcast shape times the dimensions not indexed."""
    import torch

    shapes = [tuple(i.shape) for i in indices if i is not None]
    if any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices):
        return x.numel()  # a boolean mask here: size_hints has not turned it into coordinates, take every element
    indexed = math.prod(torch.broadcast_shapes(*shapes)) if shapes else 1
    rest = [x.shape[d] for d, i in enumerate(indices) if i is None] + list(x.shape[len(indices) :])
    return indexed * math.prod(rest)


def _written(args: Sequence[Any], kwargs: Dict[str, Any], before: Optional[int]) -> Optional[int]:
    """index_put(x, indices, values): x's bound before the write, plus the positions written (unless values are 0)."""
    if before is None:
        return None
    values = args[2] if len(args) > 2 else kwargs.get("values")
    return before if _known_zero(values) else before + _positions(args[0], args[1])


def _index_filled(args: Sequence[Any], kwargs: Dict[str, Any], before: Optional[int]) -> Optional[int]:
    """index_fill(x, dim, index, value): x's bound before, plus the elements at `index` along `dim` (unless 0)."""
    if before is None or len(args) < 3 or not isinstance(args[1], int):
        return None  # a dimension given by name (the Dimname overloads): no rule
    x, dim, index = args[0], args[1], args[2]
    value = args[3] if len(args) > 3 else kwargs.get("value")
    if value is not None and _known_zero(value):
        return before
    rest = math.prod(size for d, size in enumerate(x.shape) if d != dim % max(x.dim(), 1))
    return before + index.numel() * rest


class MaskCounts:
    """Per boolean or integer fake tensor of one trace: at most how many of its elements are not zero, where a rule
    says."""

    def __init__(self) -> None:
        from torch.utils.weak import WeakTensorKeyDictionary

        self._bounds: Any = WeakTensorKeyDictionary()  # tensor -> (bound, its storage)

    def bound(self, x: Any) -> Optional[int]:
        """At most how many elements of x are not zero, or None (no rule saw it made)."""
        import torch

        entry = self._bounds.get(x) if isinstance(x, torch.Tensor) else None
        return None if entry is None else entry[0]

    def see(self, func: Any, args: Sequence[Any], kwargs: Dict[str, Any], out: Any) -> None:
        """After an op ran: forget what it wrote over, then keep the bound of what it made or wrote, by the rules."""
        import torch

        if not len(self._bounds) and func.overloadpacket.__name__ not in _MAKERS:
            return  # nothing bounded yet: only an op that makes zeros can start
        before = self.bound(args[0]) if args and isinstance(args[0], torch.Tensor) else None
        for i in _written_arguments(func):
            if i < len(args) and isinstance(args[i], torch.Tensor):
                self._forget(args[i])
        if not isinstance(out, torch.Tensor) or out.is_floating_point() or out.is_complex():
            return  # masks and indices only: a float tensor's zeros (activations, gradients) are not selected from
        bound = self._rule(func.overloadpacket.__name__, args, kwargs, before)
        if bound is not None:
            self._bounds[out] = (min(bound, out.numel()), _storage(out))

    def _forget(self, target: Any) -> None:
        storage = _storage(target)
        for tensor in [t for t, (_, s) in self._bounds.items() if s == storage]:
            del self._bounds[tensor]

    def _rule(self, name: str, args: Sequence[Any], kwargs: Dict[str, Any], before: Optional[int]) -> Optional[int]:
        """The bound of the op's output by the rules above; `before`: its first argument's, read before any write."""
        if name in _ZEROS:
            return 0
        if name in _FILLED:
            value = args[-1] if len(args) >= 2 else kwargs.get("fill_value", kwargs.get("value"))
            return 0 if value is not None and _known_zero(value) else None
        if name == "zero_":
            return 0
        if name in _WRITES:
            return _written(args, kwargs, before)
        if name in _FILLS:
            return _index_filled(args, kwargs, before)
        if name in _SUMS:
            parts = args[0] if name == "cat" else args[:2]
            bounds = [self.bound(t) for t in parts]
            return None if None in bounds else sum(b for b in bounds if b is not None)
        if name in _SMALLER:
            known = [b for b in (self.bound(t) for t in args[:2]) if b is not None]
            return min(known) if known else None
        if name in _SAME or (len(args) == 2 and _false_at_zero(name, args[1])):
            return before
        return None
