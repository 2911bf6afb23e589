"""Who holds tensors: the walk over the user's variables (heldby.walk) never makes torch warn in the user's cell."""

from __future__ import annotations

import warnings

import pytest

from gpumem_kernel.heldby.walk import holders
from ipython_shell import fresh_shell

torch = pytest.importorskip("torch")


def test_a_non_leaf_tensor_is_measured_without_the_grad_warning_and_a_retained_grad_counts() -> None:
    with fresh_shell() as shell:
        shell.run_cell(
            "import torch\n"
            "x = torch.ones(1000, requires_grad=True)\n"
            "y = x * 2\n"  # a non-leaf: reading its .grad makes torch warn
            "z = x * 3\n"
            "z.retain_grad()\n"
            "z.sum().backward()\n",
            store_history=False,
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = {h.name: h for h in holders(shell)}
    assert [str(w.message) for w in caught] == []
    assert found["y"].tensors == 1 and found["y"].bytes == 4000
    assert found["z"].tensors == 2 and found["z"].bytes == 8000  # its retained gradient too
    assert found["x"].tensors == 2  # a leaf: its gradient
