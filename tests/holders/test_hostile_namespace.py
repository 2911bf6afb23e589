"""A namespace never disables a feature: with variables that cannot be inspected (a dead weakref.proxy, a raising
`__getattribute__` or `__class__`), that lie (a `__class__` property, a Mock given a spec), or that are huge, deep
or cyclic, the holders, the safe clear (magic and panel action), the OOM checklist and the growth notice still
answer for the ordinary variables and name the skipped ones in one line; a MODEL, --optimizer or --input that
cannot be inspected gets one line, never a traceback. In-process IPython with CPU tensors standing in for CUDA
ones (the holders' test switch), and one real ipykernel at the end. No assertion depends on time."""

from __future__ import annotations

import functools
import json
from typing import Iterator, List, Tuple

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel import extension  # noqa: E402
from gpumem_kernel.channel import frontend  # noqa: E402
from gpumem_kernel.clear.reclaim import CLEAR_MIME, clear_gpu_memory  # noqa: E402
from gpumem_kernel.growth import hook as growth_hook  # noqa: E402
from gpumem_kernel.growth import memory  # noqa: E402
from gpumem_kernel.growth.memory import Reading  # noqa: E402
from gpumem_kernel.heldby import collect  # noqa: E402
from gpumem_kernel.heldby import hook as holders_hook  # noqa: E402
from gpumem_kernel.heldby.report import text  # noqa: E402
from gpumem_kernel.oom.bundle import OOM_MIME  # noqa: E402
from gpumem_kernel.oom.handler import install_oom_handler, last_oom  # noqa: E402
from gpumem_kernel.oom.namespace import scan_namespace  # noqa: E402
from ipython_shell import fresh_shell  # noqa: E402
from kernel_harness import KernelHarness, torch_in_kernel_python  # noqa: E402

HOSTILE = """
import weakref
import torch
from unittest.mock import MagicMock
class Gone: pass
gone = Gone()
p = weakref.proxy(gone)                      # dead below: every attribute read raises ReferenceError
del gone
class Hostile:
    def __getattribute__(self, name): raise RuntimeError("no attributes here")
h = Hostile()
class NoClass:
    @property
    def __class__(self): raise LookupError("no class either")
c = NoClass()
class Liar:                                  # claims to be a tensor; is not one
    @property
    def __class__(self): return torch.Tensor
liar = Liar()
mock = MagicMock()
mock_model = MagicMock(spec=torch.nn.Module)  # isinstance says Module, and every attribute exists
class Tagged(torch.Tensor): pass
tagged = torch.ones(16).as_subclass(Tagged)
many = [[]] * 5_000_000
deep = []
for _ in range(20_000):
    deep = [deep]
loop = [torch.ones(8)]
loop.append(loop)
keep = torch.ones(32)
batch_size = 64
model = torch.nn.Linear(4, 4)
"""
SKIPPED = "skipped 3 variables that could not be inspected: p (ReferenceError), h (RuntimeError), c (LookupError)"
ORDINARY = {"keep": 128, "tagged": 64, "loop": 32, "model": 80}  # what each holds, in bytes
NOT_HOLDERS = {"liar", "mock", "mock_model", "many", "deep", "p", "h", "c"}
OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.75 GiB of which "
    "3.06 MiB is free. Of the allocated memory 14.56 GiB is allocated by PyTorch, and 51.92 MiB is reserved "
    "by PyTorch but unallocated."
)
MiB = 1 << 20


def run(sh: InteractiveShell, code: str, cell_id: str = "cell-a") -> Tuple[object, object]:
    with capture_output() as captured:
        result = sh.run_cell(code, store_history=True, cell_id=cell_id)
    return result, captured


def define(sh: InteractiveShell, code: str = HOSTILE) -> None:
    result, captured = run(sh, code)
    assert result.error_in_exec is None, (result.error_in_exec, captured.stderr)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with fresh_shell() as sh:
        define(sh)
        yield sh


@pytest.fixture
def cpu_as_cuda(monkeypatch) -> None:
    """The holders' test switch: CPU tensors count as the device's, and the per-cell walk has no time budget."""
    on_cpu = (lambda tensor: tensor.device.type == "cpu"), 10**6
    monkeypatch.setattr(collect, "cuda_in_use", lambda: on_cpu)
    monkeypatch.setattr(holders_hook, "cuda_in_use", lambda: on_cpu)
    monkeypatch.setattr(holders_hook, "after_cell", functools.partial(holders_hook.after_cell, budget_ms=None))


def user_variables_left(sh: InteractiveShell) -> None:
    assert {"p", "h", "c", "liar", "mock", "mock_model", "many", "deep", "loop", "keep", "model"} <= set(sh.user_ns)


# --- holders --------------------------------------------------------------------------------------------------


def test_holders_list_the_ordinary_variables_and_name_the_skipped_ones(shell):
    report = collect.collect(shell, device="cpu", budget_ms=None)

    held = {entry.name: entry.bytes for entry in report.entries}
    assert held == ORDINARY and not NOT_HOLDERS & set(held)
    assert not report.skipped and report.note is None and report.uninspected == SKIPPED
    table = text(report)
    assert table.splitlines()[-1] == f"  {SKIPPED}" and table.count("skipped") == 1
    assert "tensor float32 [16] on cpu" in table  # the tensor subclass is a tensor


def test_holders_magic_and_hook(shell, cpu_as_cuda):
    shell.extension_manager.load_extension("gpumem_kernel")
    try:
        _, captured = run(shell, "%gpumem holders")
        data = json.loads(run(shell, "%gpumem holders --json")[1].stdout)
        message = extension.current().holders.last_message()
    finally:
        shell.extension_manager.unload_extension("gpumem_kernel")

    assert "Traceback" not in captured.stdout + captured.stderr and captured.stderr == ""
    assert captured.stdout.count(SKIPPED) == 1 and "keep" in captured.stdout
    assert {e["name"] for e in data["entries"]} == set(ORDINARY) and data["uninspected"] == SKIPPED
    assert message is not None and message["note"] == SKIPPED  # the panel's "Held by" says it too


ABORTING = """
class Abort(BaseException):  # not an Exception: a walk that catches only Exception would let it end the feature
    pass
class Aborting:
    def __getattribute__(self, name): raise Abort("no")
aborting = Aborting()
class HalfModule(torch.nn.Module):  # yields one parameter, then aborts: what it reached must not be charged on
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.ones(100))
    def parameters(self, recurse=True):
        yield self.a
        raise Abort("half way")
half = HalfModule()
after = torch.ones(4)
"""


def test_an_exception_that_is_not_an_exception_is_named_too(shell):
    define(shell, ABORTING)
    report = collect.collect(shell, device="cpu", budget_ms=None)

    assert report.uninspected == SKIPPED.replace("skipped 3", "skipped 5") + ", aborting (Abort), half (Abort)"
    held = {entry.name: entry.bytes for entry in report.entries}
    assert held == {**ORDINARY, "after": 16}  # nothing `half` reached before it aborted is charged to `after`
    clear = clear_gpu_memory(shell, dry_run=True)
    assert clear.notes[-1].startswith("skipped 5 variables") and "half (Abort)" in clear.notes[-1]
    scan = scan_namespace(shell)  # the OOM checklist's look at the namespace
    assert [name for name, _ in scan.models] == ["model"] and "half (Abort)" in str(scan.skipped.line())


def test_a_keyboard_interrupt_is_never_swallowed(shell):
    define(
        shell,
        "class Interrupting:\n    def __getattribute__(self, name): raise KeyboardInterrupt\nctrl_c = Interrupting()",
    )
    with pytest.raises(KeyboardInterrupt):
        collect.collect(shell, device="cpu", budget_ms=None)
    with pytest.raises(KeyboardInterrupt):
        clear_gpu_memory(shell, dry_run=True)


# --- clear ----------------------------------------------------------------------------------------------------


TRACEBACK_ONLY = """
import gc
def f():
    t = torch.ones(10**6)
    global w
    w = weakref.ref(t)
    raise ValueError
"""


def test_clear_frees_the_traceback_and_lists_the_rest(shell):
    define(shell, TRACEBACK_ONLY)
    run(shell, "f()")
    run(shell, "gc.collect()")
    assert shell.user_ns["w"]() is not None

    report = clear_gpu_memory(shell)

    assert shell.user_ns["w"]() is None  # the tensor only the traceback held is gone
    assert report.notes.count(SKIPPED) == 1
    assert {h.name for h in report.holders} == set(ORDINARY)
    user_variables_left(shell)


def test_clear_list_and_the_magic_show_one_line_and_change_nothing(shell):
    dry = clear_gpu_memory(shell, dry_run=True)
    assert dry.notes.count(SKIPPED) == 1 and {h.name for h in dry.holders} == set(ORDINARY)

    shell.extension_manager.load_extension("gpumem_kernel")
    try:
        shown = [run(shell, line)[1] for line in ("%gpumem clear --list", "%gpumem clear")]
    finally:
        shell.extension_manager.unload_extension("gpumem_kernel")
    for captured in shown:
        assert "Traceback" not in captured.stdout + captured.stderr
        (output,) = captured.outputs
        assert output.data[CLEAR_MIME]["notes"].count(SKIPPED) == 1
        assert output.data["text/plain"].count(SKIPPED) == 1
    user_variables_left(shell)


def test_clear_all_cuda_vars_never_deletes_what_it_could_not_inspect(shell):
    clear_gpu_memory(shell, all_cuda_vars=True)  # no CUDA here: nothing holds CUDA memory
    user_variables_left(shell)


def test_a_variable_that_cannot_be_inspected_is_deleted_when_named(shell):
    report = clear_gpu_memory(shell, variables=["p", "keep"])

    assert [(h.name, h.bytes) for h in report.deleted] == [("p", 0), ("keep", 128)]
    assert "p" not in shell.user_ns and "keep" not in shell.user_ns and "h" in shell.user_ns
    assert report.notes.count(SKIPPED) == 1  # p was looked at before it went


def test_the_panels_clear_action_answers_ok(shell):
    answer = json.loads(frontend.clear())
    assert answer["ok"] is True, answer
    assert answer["report"]["notes"].count(SKIPPED) == 1
    assert {h["name"] for h in answer["report"]["holders"]} == set(ORDINARY)
    user_variables_left(shell)


# --- the OOM checklist ----------------------------------------------------------------------------------------


def test_an_oom_gets_its_checklist_with_the_ordinary_variables(shell):
    install_oom_handler(shell, probe=lambda: None)
    result, captured = run(shell, f"def step():\n    raise torch.OutOfMemoryError({OOM_TEXT!r})\nstep()")

    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    assert "could not build the OOM checklist" not in captured.stderr
    (output,) = captured.outputs
    diagnosis = output.data[OOM_MIME]["diagnosis"]
    assert diagnosis["notes"].count(SKIPPED) == 1 and output.data["text/plain"].count(SKIPPED) == 1
    assert diagnosis["batch_size"] == 64 and diagnosis["batch_size_source"] == "batch_size"
    assert diagnosis["model"]["name"] == "model"  # never the Mock that says it is a Module
    assert last_oom(shell) == output.data[OOM_MIME]


def test_the_panels_checklist_of_an_oom_the_handler_did_not_see(shell):
    result, _ = run(shell, f"raise torch.OutOfMemoryError({OOM_TEXT!r})")  # no handler: built on request
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)

    for answer in (frontend.last_oom(), frontend.oom_from_text(f"OutOfMemoryError: {OOM_TEXT}")):
        decoded = json.loads(answer)
        assert decoded["ok"] is True, decoded
        assert decoded["oom"]["diagnosis"]["notes"].count(SKIPPED) == 1


# --- growth ---------------------------------------------------------------------------------------------------


class Allocator:
    """allocated grows by 8 MiB each time a cell calls `grow()`; readings as growth.memory.read gives them."""

    def __init__(self) -> None:
        self.allocated = 100 * MiB

    def grow(self) -> None:
        self.allocated += 8 * MiB

    def read(self):
        return {"cuda:0": Reading(self.allocated, self.allocated)}


def test_a_growing_cell_is_named_with_its_growing_variable(shell, cpu_as_cuda, monkeypatch):
    allocator = Allocator()
    monkeypatch.setattr(memory, "read", allocator.read)
    monkeypatch.setattr(memory, "headroom", lambda device, reading: 40 * MiB)
    define(shell, "w = torch.ones(4, requires_grad=True)\nlosses = []")
    shell.user_ns["allocator"] = allocator
    sent: List[dict] = []
    walk = holders_hook.HoldersHook(shell, holders_hook.LastHolders())
    hooks = growth_hook.install(shell, sent.append, holders=walk)  # the walk, then growth, at each cell's end
    try:
        outputs = [run(shell, "losses.append((w * 2).sum())\nallocator.grow()")[1] for _ in range(3)]
    finally:
        growth_hook.uninstall(hooks)

    assert [o.outputs for o in outputs[:2]] == [[], []]
    (notice,) = outputs[2].outputs
    lines = notice.data["text/plain"].splitlines()
    assert lines[1].startswith("  grew since the last run: `losses` +1 tensor")
    assert lines[-1] == f"  {SKIPPED}" and SKIPPED in notice.data["text/html"]
    assert [m["rerun"]["holders"][0]["name"] for m in sent] == ["losses"]


# --- arguments ------------------------------------------------------------------------------------------------


ARGUMENTS = "pair = (torch.ones(2, 4), p)\nbad_optimizers = [torch.optim.SGD(model.parameters(), 0.1), h]"


@pytest.fixture(scope="module")
def ip() -> Iterator[InteractiveShell]:
    with gpumem_shell() as sh:
        define(sh, HOSTILE + ARGUMENTS)
        yield sh


@pytest.mark.parametrize(
    "line, message",
    [
        ("%gpumem analyze p", "MODEL p could not be inspected (ReferenceError)"),
        ("%gpumem analyze h", "MODEL h could not be inspected (RuntimeError)"),
        ("%gpumem analyze c", "MODEL c could not be inspected (LookupError)"),
        ("%gpumem analyze p.weight", "MODEL: reading p.weight raised ReferenceError"),
        ("%gpumem analyze mock_model", "mock_model is a MagicMock, not a torch.nn.Module"),
        ("%gpumem analyze liar", "liar is a Liar, not a torch.nn.Module"),
        ("%gpumem analyze model --optimizer p", "--optimizer p could not be inspected (ReferenceError)"),
        ("%gpumem analyze model --optimizer mock", "--optimizer mock: a MagicMock, not a torch.optim.Optimizer"),
        ("%gpumem analyze model --input c", "--input c could not be inspected (LookupError)"),
        ("%gpumem analyze model --input pair", "--input pair[1] could not be inspected (ReferenceError)"),
        ("%gpumem analyze model --input deep", "--input deep is nested more than 32 levels deep"),
        ("%gpumem analyze model --loss h", "--loss h could not be inspected (RuntimeError)"),
        (
            "%gpumem analyze model --optimizer bad_optimizers --step h",
            "--optimizer bad_optimizers[1] could not be inspected (RuntimeError)",
        ),
        ("%gpumem autobatch p --input 4", "MODEL p could not be inspected (ReferenceError)"),
        ("%gpumem autobatch model --input h", "--input h could not be inspected (RuntimeError)"),
        ("%gpumem benchmark p --synthetic 4", "MODEL p could not be inspected (ReferenceError)"),
        ("%gpumem benchmark model --synthetic 4 --optimizer c", "--optimizer c could not be inspected (LookupError)"),
    ],
)
def test_an_argument_that_cannot_be_inspected_is_one_line(ip, line, message):
    _, captured = run(ip, line)

    command = line.split()[1]
    assert captured.stderr.startswith(f"UsageError: gpumem {command}: "), captured.stderr
    assert message in captured.stderr and captured.stderr.count("\n") == 1, captured.stderr
    assert "Traceback" not in captured.stdout + captured.stderr and captured.outputs == []


def test_the_users_own_error_still_shows(ip):
    define(ip, "def broken_loss(output, batch):\n    raise ZeroDivisionError('the loss divides by zero')")
    _, captured = run(ip, "%gpumem analyze model -b 2 --input 4 --loss broken_loss --memory 1GiB")
    assert "the loss divides by zero" in captured.stdout + captured.stderr
    assert "could not be inspected" not in captured.stdout + captured.stderr


# --- a real kernel --------------------------------------------------------------------------------------------


SWITCH = (
    "import functools, gpumem_kernel.heldby.collect as _collect, gpumem_kernel.heldby.hook as _hook\n"
    "_on_cpu = ((lambda tensor: tensor.device.type == 'cpu'), 0)\n"
    "_collect.cuda_in_use = _hook.cuda_in_use = lambda: _on_cpu\n"
    "_hook.after_cell = functools.partial(_hook.after_cell, budget_ms=None)\n"
)


def _shown(kernel: KernelHarness, msg_id: str) -> List[dict]:
    return [r.content["data"] for r in kernel.messages() if r.parent_id == msg_id and r.msg_type == "display_data"]


def _stderr(kernel: KernelHarness, msg_id: str) -> str:
    return "".join(
        r.content["text"]
        for r in kernel.messages()
        if r.parent_id == msg_id and r.msg_type == "stream" and r.content["name"] == "stderr"
    )


@pytest.mark.kernel
@pytest.mark.skipif(not torch_in_kernel_python(), reason="torch is not installed for the kernel's Python")
def test_in_a_real_kernel_the_checklist_clear_and_holders_work():
    with KernelHarness() as kernel:
        kernel.bootstrap()
        comm_id = kernel.open_comm({"type": "open", "protocol": 1, "interval": 10.0, "client": "test"})
        kernel.wait_comm(comm_id, "hello")
        for code in (SWITCH, HOSTILE):
            assert kernel.execute(code)["status"] == "ok"

        oom = kernel.execute(f"def step():\n    raise torch.OutOfMemoryError({OOM_TEXT!r})\nstep()")
        checklist = _shown(kernel, oom["msg_id"])
        holders = kernel.execute("%gpumem holders")
        holders_text = kernel.evaluate("__import__('gpumem_kernel').holders().uninspected")
        again = kernel.execute("%gpumem oom")
        magic = kernel.execute("%gpumem clear")
        panel = json.loads(kernel.evaluate("__import__('gpumem_kernel').frontend.clear()"))
        held_by = kernel.wait_comm(comm_id, "holders", where=lambda d: d["cell"] == holders["execution_count"])
        alive = kernel.evaluate("sorted(n for n in ('p', 'h', 'c', 'mock', 'deep', 'many', 'keep') if n in globals())")

    assert oom["ename"] == "OutOfMemoryError" and "could not build" not in _stderr(kernel, oom["msg_id"])
    (bundle,) = checklist
    assert bundle[OOM_MIME]["diagnosis"]["notes"].count(SKIPPED) == 1
    assert bundle[OOM_MIME]["diagnosis"]["model"]["name"] == "model"
    assert again["status"] == "ok" and _shown(kernel, again["msg_id"]) == checklist  # `%gpumem oom` shows it again
    assert holders["status"] == "ok" and holders_text == SKIPPED and held_by["note"] == SKIPPED
    assert magic["status"] == "ok" and _stderr(kernel, magic["msg_id"]) == ""
    (cleared,) = _shown(kernel, magic["msg_id"])
    assert cleared[CLEAR_MIME]["notes"].count(SKIPPED) == 1
    assert panel["ok"] is True and panel["report"]["notes"].count(SKIPPED) == 1
    assert {h["name"] for h in panel["report"]["holders"]} == set(ORDINARY)
    assert alive == ["c", "deep", "h", "keep", "many", "mock", "p"]
