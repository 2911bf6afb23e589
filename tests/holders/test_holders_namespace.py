"""Holders: which variables hold device memory. The same walk as on CUDA, on CPU tensors (the device
predicate is a parameter), in an in-process IPython shell."""

from __future__ import annotations

import gc
import weakref
from typing import Dict, Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from gpumem_kernel.heldby import hook
from gpumem_kernel.heldby.collect import collect
from gpumem_kernel.heldby.report import OUT_ENTRY, TRACEBACK_ENTRY, HolderEntry, text
from gpumem_kernel.heldby.walk import Limits
from ipython_shell import fresh_shell

torch = pytest.importorskip("torch")

SETUP = """
import dataclasses
import torch
model = torch.nn.Linear(100, 120)                     # 12,120 params
opt = torch.optim.Adam(model.parameters())
model(torch.randn(4, 100)).sum().backward()
opt.step()                                             # state: exp_avg, exp_avg_sq per parameter
w = torch.ones(10, requires_grad=True)
losses = [(w * i).sum() for i in range(40)]            # each keeps its autograd graph
tensors = {"a": torch.zeros(1000), "b": torch.zeros(24)}
big = torch.ones(5000)
view = big[:100]                                       # the same storage
@dataclasses.dataclass
class Batch:
    inputs: list
batch = Batch([torch.ones(8)])
"""
PARAM_BYTES = 12_120 * 4


def run(shell: InteractiveShell, code: str) -> None:
    result = shell.run_cell(code, store_history=True)
    assert result.error_in_exec is None or code.startswith("raise"), result.error_in_exec


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with fresh_shell() as sh:
        run(sh, SETUP)
        yield sh


def by_name(shell: InteractiveShell, **kwargs) -> Dict[str, HolderEntry]:
    report = collect(shell, device="cpu", budget_ms=None, **kwargs)
    assert not report.skipped, report.note
    return {entry.name: entry for entry in report.entries}


def test_each_variable_holds_what_it_reaches_each_storage_counted_once(shell):
    found = by_name(shell)
    model, opt = found["model"], found["opt"]
    assert model.bytes == 2 * PARAM_BYTES  # parameters and gradients
    assert model.description == "Linear, 12.1K params, gradients"
    # its state only (exp_avg, exp_avg_sq, and `step`: a CPU scalar, on CUDA too); the parameters are the model's
    assert opt.bytes == 2 * PARAM_BYTES + 2 * 4
    assert opt.reached_bytes == 4 * PARAM_BYTES + 2 * 4
    assert opt.shared_with == ["model"] and model.shared_with == ["opt"]
    assert opt.description == "Adam, state for 2 parameters"
    assert found["losses"].description == (
        "list of 40 tensors with grad history; keeps 320 B alive through autograd graphs — store `loss.item()` or "
        "`t.detach()`"
    )  # each graph saved its multiplier (a 0-dim int64 tensor)
    assert found["tensors"].description == "dict of 2 tensors" and found["tensors"].bytes == 1024 * 4
    assert found["batch"].description == "dataclass Batch reaching 1 tensor" and found["batch"].bytes == 32
    # a view: one storage, charged once, both names say so
    assert found["big"].bytes == 20_000 and found["big"].shared_with == ["view"]
    assert found["view"].bytes == 0 and found["view"].shared_with == ["big"]
    assert "Batch" not in found and "torch" not in found and "dataclasses" not in found


def test_the_table_and_the_remainder_no_variable_reaches(shell):
    report = collect(shell, device="cpu", allocated=10**6, budget_ms=None)
    assert report.unreachable == 10**6 - report.reachable
    table = text(report)
    assert table.splitlines()[0] == "CPU memory held by your variables (976.56 KiB allocated):"
    assert "shared with `big` (19.53 KiB counted there)" in table
    assert "not reachable from your variables" in table
    assert "`losses` keeps autograd graphs" in table
    rows = text(report, top=2).splitlines()[1:5]  # the two largest, the rest in one line, the remainder
    more = len(report.entries) - 2
    assert [row.split()[0] for row in rows] == [e.name for e in report.entries[:2]] + [f"({more}", "not"]
    assert report.to_dict(top=2)["more"] == len(report.entries) - 2


def test_a_tensor_only_in_ipythons_output_cache_is_its_own_entry(shell):
    run(shell, "torch.ones(3000)")  # shown: Out[N], `_` and `_N` keep it
    found = by_name(shell)
    out = found[OUT_ENTRY]
    assert out.source == "ipython" and out.bytes == 12_000
    assert "Out[" in out.description and "%gpumem clear" in out.description
    run(shell, "kept = _")
    found = by_name(shell)
    assert found["kept"].bytes == 12_000 and found["kept"].shared_with == [OUT_ENTRY]


def test_the_last_errors_frames_are_their_own_entry(shell):
    run(shell, "def step():\n    activations = torch.ones(2500)\n    raise ValueError('boom')\n")
    run(shell, "raise_it = step()")
    found = by_name(shell)
    assert found[TRACEBACK_ENTRY].bytes == 10_000 and "step" in found[TRACEBACK_ENTRY].description


def test_containers_are_walked_to_a_bounded_depth_and_a_cycle_ends():
    with fresh_shell() as sh:
        run(sh, "import torch\ndeep = [[[torch.ones(10)]]]\ndeeper = [[[[torch.ones(10)]]]]")
        run(sh, "loop = []\nloop.append(loop)")
        found = by_name(sh)
    assert "deep" in found and "deeper" not in found and "loop" not in found


def test_past_the_budget_the_report_is_a_skip_with_a_note(shell):
    run(shell, "many = [[i] for i in range(3000)]")
    report = collect(shell, device="cpu", budget_ms=0.0)
    assert report.skipped and report.entries == [] and report.unreachable is None
    assert report.note.startswith("skipped: looking through your variables took over 0 ms")
    capped = collect(shell, device="cpu", budget_ms=None, limits=Limits(objects=100))
    assert not capped.skipped and capped.note.startswith("stopped after 100 objects")


def test_no_user_object_outlives_the_walk(shell, monkeypatch):
    run(shell, "held = {'x': torch.ones(4000)}")
    ref = weakref.ref(shell.user_ns["held"]["x"])
    monkeypatch.setattr(hook, "cuda_in_use", lambda: ((lambda t: t.device.type == "cpu"), 0))
    last = hook.LastHolders()
    report = hook.after_cell(shell, keep=last)
    assert report is not None and last.last() is report and "held" in {e.name for e in report.entries}
    run(shell, "del held")
    gc.collect()
    assert ref() is None


def test_the_hook_walks_nothing_without_cuda(shell):
    assert hook.after_cell(shell) is None  # this torch has no CUDA initialised


def test_subclasses_deques_slots_and_proxies_are_walked_as_what_they_are():
    code = """
import collections, dataclasses, torch
class Losses(list): pass
@dataclasses.dataclass(slots=True)
class Slotted:
    t: object
class Box:
    def __init__(self, t): self.t = t
class Proxy:  # claims its wrapped object's class: each proxy is what it wraps, whatever the one before was
    def __init__(self, wrapped): object.__setattr__(self, "wrapped", wrapped)
    @property
    def __class__(self): return type(self.wrapped)
    def __iter__(self): return iter(self.wrapped)
sub = Losses([torch.ones(2)])
user = collections.UserDict(t=torch.ones(3))
queue = collections.deque([torch.ones(4)])
slotted = Slotted(torch.ones(5))
wraps_list = Proxy([torch.ones(6)])
wraps_box = Proxy(Box(torch.ones(7)))
"""
    with fresh_shell() as sh:
        run(sh, code)
        found = by_name(sh)
    sizes = {name: found[name].bytes for name in ("sub", "user", "queue", "slotted", "wraps_list", "wraps_box")}
    assert sizes == {"sub": 8, "user": 12, "queue": 16, "slotted": 20, "wraps_list": 24, "wraps_box": 28}
    assert found["sub"].description == "Losses of 1 tensor" and found["queue"].description == "deque of 1 tensor"
