"""The trace follows CUDA's autocast policy where CPU autocast's differs
(gpumem_kernel/analysis/fake/autocast_policy.py): each call below runs under PyTorch's own CUDA autocast kernels on fake
CUDA tensors (they are registered in CPU builds too) and under the trace's CPU autocast; the ops that make tensors and
the result's dtype must be the same."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from fake_cuda import fake_cuda_autocast, unusable
from gpumem_kernel.analysis.fake import autocast_policy
from gpumem_kernel.analysis.fake.cuda_kernels import cuda_kernels

# ops that make no tensor of their own (views, device queries): not part of what a call keeps
_NOT_ALLOCATING = {"device", "promote_types", "view", "_unsafe_view", "permute", "unsqueeze", "expand", "alias", "t"}
_NOT_ALLOCATING |= {"transpose", "detach", "slice", "select", "squeeze", "as_strided"}


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: List[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket.__name__ not in _NOT_ALLOCATING:
            self.seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _calls(device: str) -> Dict[str, Callable[[], Any]]:
    """One call per policy entry, with a bf16 activation `a` beside fp32 tensors as mixed models have them. No
    indexing: a CPU build cannot slice a fake CUDA tensor."""

    def make(*shape: int, dtype: Any = torch.float32) -> Any:
        return torch.zeros(shape, dtype=dtype, device=device)

    a, b = make(4, 8, dtype=torch.bfloat16), make(4, 8)
    index = make(4, dtype=torch.long)
    return {
        # fp32: CUDA casts up, CPU autocast leaves bf16
        "logsumexp": lambda: a.logsumexp(-1),
        "torch.cdist": lambda: torch.cdist(a, a),
        # fp32 dtype: CUDA gives reductions and softmax an fp32 dtype
        "Tensor.softmax": lambda: a.softmax(-1),
        "torch.softmax": lambda: torch.softmax(a, -1),
        "Tensor.log_softmax": lambda: a.log_softmax(-1),
        "Tensor.sum": lambda: a.sum(),
        "torch.sum": lambda: torch.sum(a, dim=1),
        "Tensor.cumsum": lambda: a.cumsum(0),
        "Tensor.prod": lambda: a.prod(),
        "Tensor.norm": lambda: a.norm(),
        "linalg.vector_norm": lambda: torch.linalg.vector_norm(a, dim=-1),
        "softmax with its own dtype": lambda: a.softmax(-1, torch.bfloat16),
        # promote: CUDA casts mixed arguments to the widest (the CPU kernels of scatter_add and tensordot refuse them)
        "addcmul": lambda: torch.addcmul(b, a, b),
        "Tensor.addcdiv": lambda: b.addcdiv(a, b),
        "atan2": lambda: torch.atan2(a, b),
        "scatter_add": lambda: b.scatter_add(0, make(4, 8, dtype=torch.long), a),
        "tensordot": lambda: torch.tensordot(a, make(8, 4), 1),
        # native: CPU autocast promotes with a copy, CUDA leaves it to the kernel
        "cat": lambda: torch.cat([a, b]),
        "stack": lambda: torch.stack([a, b]),
        "index_copy": lambda: b.index_copy(0, index, a),
        # the same on both, with or without the policy
        "mean": lambda: a.mean(),
        "gelu": lambda: F.gelu(a),
        "mse_loss": lambda: F.mse_loss(a, b),
        "einsum": lambda: torch.einsum("ij,kj->ik", a, a),
    }


def _run(device: str) -> Dict[str, Tuple[Any, List[str]]]:
    """Each call's result dtype (or "refused") and the ops it ran."""
    out: Dict[str, Tuple[Any, List[str]]] = {}
    for name, call in _calls(device).items():
        with _Ops() as ops:
            try:
                result = call().dtype
            except RuntimeError as exc:
                if unusable(exc):
                    raise
                result = "refused"
        out[name] = (result, ops.seen)
    return out


def _cpu(policy: bool) -> Dict[str, Tuple[Any, List[str]]]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), torch.autocast("cpu", dtype=torch.bfloat16):
        with cuda_kernels() if policy else contextlib.nullcontext():
            return _run("cpu")


def test_each_call_makes_the_tensors_cuda_autocast_makes() -> None:
    with fake_cuda_autocast():
        cuda = _run("cuda")
    traced = _cpu(policy=True)
    assert {name: traced[name] for name in cuda if traced[name] != cuda[name]} == {}


def test_without_the_policy_the_cpu_differs_where_the_policy_says() -> None:
    """What the policy is for: CPU autocast alone keeps other dtypes, makes other copies, or refuses the call."""
    with fake_cuda_autocast():
        cuda = _run("cuda")
    plain = _cpu(policy=False)
    assert {name for name in cuda if plain[name] != cuda[name]} == set(cuda) - {
        "mean",
        "gelu",
        "mse_loss",
        "einsum",
        "softmax with its own dtype",
        "torch.cdist",  # in both fp32 lists
    }
    assert plain["scatter_add"][0] == "refused" and plain["Tensor.softmax"][0] == torch.bfloat16
    assert torch.Tensor.softmax is torch._C.TensorBase.softmax and torch.cat is torch._C._VariableFunctions.cat


def test_every_policy_entry_is_swapped_and_put_back() -> None:
    before = {(id(owner), name): owner.__dict__.get(name) for owner, name, _ in autocast_policy.swaps(_Seen())}
    with cuda_kernels():
        assert torch.Tensor.cumsum is not torch._C.TensorBase.cumsum and torch.linalg.vector_norm.__wrapped__
    after = {(id(owner), name): owner.__dict__.get(name) for owner, name, _ in autocast_policy.swaps(_Seen())}
    assert after == before
    assert "cumsum" not in torch.Tensor.__dict__ and "exp" not in torch.Tensor.__dict__


def test_outside_autocast_the_policy_changes_nothing() -> None:
    a = torch.randn(4, 8, dtype=torch.bfloat16)
    with cuda_kernels() as seen:
        values = (a.softmax(-1), a.sum(), torch.cat([a, a.float()]), torch.addcmul(a.float(), a, a.float()))
    assert [v.dtype for v in values] == [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]
    assert seen.autocast == 0


class _Seen(autocast_policy.Counter):
    pass
