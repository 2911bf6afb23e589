"""The growth hooks in an in-process shell, with scripted readings: a run is measured around itself, a cell is known
by its id, %%gpumem's nested run counts once, and without device memory in use nothing is read or shown."""

from __future__ import annotations

from typing import Iterator, List

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpumem_kernel.growth import hook, memory
from gpumem_kernel.growth.memory import Reading
from ipython_shell import fresh_shell

MiB = 1 << 20


class Allocator:
    """allocated grows by `step` each time a cell calls `grow()`; readings as growth.memory.read gives them."""

    def __init__(self) -> None:
        self.allocated = 100 * MiB
        self.in_use = True

    def grow(self, step: int = 8 * MiB) -> None:
        self.allocated += step

    def read(self):
        return {"cuda:0": Reading(self.allocated, self.allocated)} if self.in_use else None


@pytest.fixture
def shell(monkeypatch) -> Iterator[InteractiveShell]:
    allocator = Allocator()
    monkeypatch.setattr(memory, "read", allocator.read)
    monkeypatch.setattr(memory, "headroom", lambda device, reading: 40 * MiB)
    with fresh_shell() as sh:
        sent: List[dict] = []
        hooks = hook.install(sh, sent.append)
        sh.user_ns["allocator"] = allocator
        try:
            yield sh, hooks, sent
        finally:
            hook.uninstall(hooks)


def run(sh: InteractiveShell, code: str, cell_id: str = "cell-a") -> str:
    with capture_output() as captured:
        sh.run_cell(code, store_history=True, cell_id=cell_id)
    return "".join(o.data.get("text/plain", "") for o in captured.outputs)


def test_the_third_consistent_run_of_a_cell_is_named_and_sent(shell):
    sh, _, sent = shell
    shown = [run(sh, "allocator.grow()") for _ in range(3)]
    third = sh.execution_count - 1  # the shell is shared: its count goes on from earlier tests
    assert shown[:2] == ["", ""]
    assert shown[2].startswith(f"Cell [{third}] leaves +8.00 MiB allocated on cuda:0 after each run (3 runs); ")
    assert shown[2].endswith("at this rate the GPU is full after 5 more runs")
    assert [m["rerun"]["runs"] for m in sent] == [3]


def test_other_cells_in_between_and_an_edited_cell_keep_the_count(shell):
    sh, _, sent = shell
    for _ in range(2):
        run(sh, "allocator.grow()")
        run(sh, "allocator.grow(3 * 8 * 1024 * 1024)", cell_id="cell-b")  # another cell, its own runs
    run(sh, "allocator.grow()  # edited", cell_id="cell-a")  # the same cell id: the same cell
    assert [(m["rerun"]["step"], m["rerun"]["runs"]) for m in sent] == [(8 * MiB, 3)]


def test_a_cell_magics_nested_run_counts_once(shell):
    sh, hooks, sent = shell
    # %%gpumem runs its body with shell.run_cell: IPython fires the cell events again inside the cell's own
    sh.register_magic_function(lambda line, cell: sh.run_cell(cell), "cell", "nested")
    try:
        for _ in range(3):
            run(sh, "%%nested\nallocator.grow()")
    finally:
        sh.magics_manager.magics["cell"].pop("nested", None)
    assert len(hooks.ledger._cells) == 1 and [m["rerun"]["runs"] for m in sent] == [3]


def test_without_device_memory_in_use_nothing_is_recorded(shell):
    sh, hooks, sent = shell
    sh.user_ns["allocator"].in_use = False
    for _ in range(4):
        assert run(sh, "allocator.grow()") == ""
    assert sent == [] and len(hooks.ledger._cells) == 0


def test_the_running_trend_listens_to_the_sampler_only_while_a_cell_runs():
    class Samples:
        def __init__(self) -> None:
            self.listeners: list = []
            self.during: list = []

        def add_listener(self, listener) -> None:
            self.listeners.append(listener)

        def remove_listener(self, listener) -> None:  # like Sampler's: one that is not listening is no error
            if listener in self.listeners:
                self.listeners.remove(listener)

    samples = Samples()
    with fresh_shell() as sh:
        hooks = hook.install(sh, lambda message: None, samples)
        sh.user_ns["samples"] = samples
        try:
            sh.run_cell("samples.during.append(len(samples.listeners))")
        finally:
            hook.uninstall(hooks)
    assert samples.during == [1] and samples.listeners == [] and hooks.trend not in samples.listeners
