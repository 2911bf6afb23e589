"""PyTorch's own CUDA autocast kernels, on fake CUDA tensors: CUDA's autocast policy read without a GPU.

The kernels are registered in CPU builds too. Where a build cannot make or use fake CUDA tensors (torch 2.8's CUDA
build without a driver touches the device; a CPU build cannot slice one), the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest
import torch

_NO_FAKE_CUDA = ("CUDA error", "support for cuda")


@contextlib.contextmanager
def fake_cuda_autocast() -> Iterator[None]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        try:
            torch.empty(1, device="cuda")
        except RuntimeError as exc:
            pytest.skip(f"no fake CUDA tensors with this torch here: {str(exc).splitlines()[0]}")
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", torch.bfloat16)
        torch.autocast_increment_nesting()
        try:
            yield
        except RuntimeError as exc:
            if not unusable(exc):
                raise
            pytest.skip(f"no fake CUDA tensors with this torch here: {str(exc).splitlines()[0]}")
        finally:
            torch.autocast_decrement_nesting()
            torch.set_autocast_enabled("cuda", False)


def unusable(exc: BaseException) -> bool:
    """True for the errors of a build that cannot run fake CUDA tensors (not a policy difference)."""
    return any(reason in str(exc) for reason in _NO_FAKE_CUDA)
