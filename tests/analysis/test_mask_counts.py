"""A mask's bound through index_fill_: torch 2.15 runs `mask[idx] = 1` as index_fill_ (2.13 ran index_put_), and
a step may call it itself; either way the select over the mask takes at most the elements written."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpumem_kernel.analysis.fake.mask_counts import MaskCounts  # noqa: E402

aten = torch.ops.aten


def _made_zeros(counts: MaskCounts, *shape: int) -> torch.Tensor:
    mask = aten.zeros.default(list(shape), dtype=torch.uint8)
    counts.see(aten.zeros.default, (list(shape),), {"dtype": torch.uint8}, mask)
    return mask


def _fill(counts: MaskCounts, mask: torch.Tensor, dim: int, index: torch.Tensor, value: int) -> None:
    out = aten.index_fill_.int_Scalar(mask, dim, index, value)
    counts.see(aten.index_fill_.int_Scalar, (mask, dim, index, value), {}, out)


def test_index_fill_adds_the_positions_it_writes() -> None:
    counts = MaskCounts()
    mask = _made_zeros(counts, 64)
    _fill(counts, mask, 0, torch.tensor([3, 9, 20, 41, 50, 63]), 1)
    assert counts.bound(mask) == 6
    _fill(counts, mask, 0, torch.tensor([0, 1]), 1)
    assert counts.bound(mask) == 8
    _fill(counts, mask, 0, torch.tensor([5, 6, 7]), 0)  # zeros written: no more can be set
    assert counts.bound(mask) == 8


def test_index_fill_along_a_dimension_counts_the_other_dimensions() -> None:
    counts = MaskCounts()
    mask = _made_zeros(counts, 8, 5)
    _fill(counts, mask, 1, torch.tensor([0, 4]), 1)
    assert counts.bound(mask) == 2 * 8
    assert int(mask.count_nonzero()) == counts.bound(mask)  # the bound is what was written here


def test_the_assignment_a_sampler_writes_keeps_its_bound_on_this_torch() -> None:
    """`mask[idx] = 1` whichever op this torch runs it as (index_put_ before 2.15, index_fill_ from it)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = MaskCounts()

    class See(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            counts.see(func, args, kwargs or {}, out)
            return out

    with See():
        mask = torch.zeros(64, dtype=torch.uint8)
        mask[torch.tensor([1, 2, 3])] = 1
    assert counts.bound(mask) == 3
