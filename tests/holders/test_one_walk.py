"""One walk over the user's variables: a `trainer` object holding a model and its optimizer holds the same memory in
the holders, the safe clear (`%gpumem clear --list`) and the OOM checklist's "what to free", and the failed
call's frames are not charged for what the trainer keeps. In-process IPython with CPU tensors standing in for
CUDA ones (the holders' test switch)."""

from __future__ import annotations

from typing import Iterator, Tuple

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import CapturedIO, capture_output

torch = pytest.importorskip("torch")

from gpumem_kernel.clear.reclaim import CLEAR_MIME, clear_gpu_memory  # noqa: E402
from gpumem_kernel.heldby import collect  # noqa: E402
from gpumem_kernel.oom.bundle import OOM_MIME  # noqa: E402
from gpumem_kernel.oom.handler import install_oom_handler  # noqa: E402
from ipython_shell import fresh_shell  # noqa: E402

TRAINER = """
import torch
class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(100, 100)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.model(torch.ones(2, 100)).sum().backward()
        self.optimizer.step()
trainer = Trainer()
"""
# weights and bias, their gradients, and SGD's momentum buffer for each
TRAINER_BYTES = 3 * (100 * 100 + 100) * 4
OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.75 GiB of which "
    "3.06 MiB is free. Of the allocated memory 14.56 GiB is allocated by PyTorch, and 51.92 MiB is reserved "
    "by PyTorch but unallocated."
)


def run(sh: InteractiveShell, code: str) -> Tuple[object, CapturedIO]:
    with capture_output() as captured:
        result = sh.run_cell(code, store_history=True)
    return result, captured


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with fresh_shell() as sh:
        sh.InteractiveTB.tb = None  # an earlier test's failed cell in this process leaves its traceback there
        result, _ = run(sh, TRAINER)
        assert result.error_in_exec is None, result.error_in_exec
        yield sh


@pytest.fixture
def cpu_as_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The holders' test switch: CPU tensors count as the GPU's."""
    monkeypatch.setattr(collect, "cuda_in_use", lambda: ((lambda tensor: tensor.device.type == "cpu"), 10**6))


def test_the_trainer_holds_its_model_and_optimizer_in_the_holders(shell):
    report = collect.collect(shell, device="cpu", budget_ms=None)
    held = {entry.name: entry.bytes for entry in report.entries}
    assert held == {"trainer": TRAINER_BYTES}


def test_the_trainer_is_in_the_clear_report_and_stays(shell):
    shell.extension_manager.load_extension("gpumem_kernel")
    try:
        _, captured = run(shell, "%gpumem clear --list")
    finally:
        shell.extension_manager.unload_extension("gpumem_kernel")
    (output,) = captured.outputs
    listed = {h["name"]: h for h in output.data[CLEAR_MIME]["holders"]}
    assert listed["trainer"]["bytes"] == TRAINER_BYTES and listed["trainer"]["type_name"] == "Trainer"
    assert "trainer" in output.data["text/plain"]
    assert "trainer" in shell.user_ns  # listed, never deleted unless named

    named = clear_gpu_memory(shell, variables=["trainer"], dry_run=True)
    assert [(h.name, h.bytes) for h in named.deleted] == [("trainer", TRAINER_BYTES)]
    assert "trainer" in shell.user_ns


def test_the_oom_checklist_names_the_trainer_in_what_to_free(shell, cpu_as_cuda):
    install_oom_handler(shell, probe=lambda: None)
    failing = f"def step(model):\n    raise torch.OutOfMemoryError({OOM_TEXT!r})\nstep(trainer.model)"
    result, captured = run(shell, failing)

    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    (output,) = captured.outputs
    diagnosis = output.data[OOM_MIME]["diagnosis"]
    (note,) = [note for note in diagnosis["notes"] if note.startswith("What to free")]
    assert "`trainer` 118.36 KiB" in note and "%gpumem clear --vars trainer" in note
    assert note in output.data["text/plain"]
    # the failed call's `model` is the trainer's: clearing the traceback frees none of it
    assert diagnosis["traceback"]["tensors"] == 0 and diagnosis["traceback"]["bytes"] == 0
