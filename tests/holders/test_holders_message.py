"""The `holders` comm message (holders.schema.json), the panel's "Held by": after a cell where CUDA is in use, every
open comm gets it, valid under its schema, per device (the top holders with their bytes there, what they share,
the remainder no variable reaches); a comm opened later gets the last one; past the budget, a skip with its note.
CPU tensors stand in for CUDA ones (the holders' test switch: cuda_in_use and allocated_by_device patched)."""

from __future__ import annotations

from typing import Iterator, List

import pytest
from IPython.core.interactiveshell import InteractiveShell

from gpumem_kernel import extension
from gpumem_kernel.heldby import collect, hook
from gpumem_kernel.heldby.message import holders_message
from gpumem_kernel.wire.protocol import validate
from fake_comm import FakeComm, open_msg
from ipython_shell import fresh_shell

torch = pytest.importorskip("torch")

ALLOCATED = 10**6
SETUP = """
import torch
model = torch.nn.Linear(100, 10)                  # 4,040 bytes of parameters
opt = torch.optim.SGD(model.parameters(), lr=0.1)  # reaches the model's parameters: shared
w = torch.ones(10, requires_grad=True)
losses = [(w * i).sum() for i in range(40)]        # each keeps its autograd graph
"""


@pytest.fixture
def ip(monkeypatch) -> Iterator[InteractiveShell]:
    on_cpu = (lambda tensor: tensor.device.type == "cpu"), ALLOCATED
    monkeypatch.setattr(collect, "cuda_in_use", lambda: on_cpu)
    monkeypatch.setattr(hook, "cuda_in_use", lambda: on_cpu)
    monkeypatch.setattr(hook, "allocated_by_device", lambda: {"cpu": ALLOCATED})
    with fresh_shell() as shell:
        shell.extension_manager.load_extension("gpumem_kernel")
        try:
            yield shell
        finally:
            shell.extension_manager.unload_extension("gpumem_kernel")


def open_comm(comm_id: str) -> FakeComm:
    loaded = extension.current()
    assert loaded is not None
    comm = FakeComm(comm_id)
    loaded.channel._on_open(comm, open_msg({"type": "open", "protocol": 1}))
    return comm


def holders(comm: FakeComm) -> List[dict]:
    return [m for m in comm.sent if m["type"] == "holders"]


def test_after_a_cell_every_open_comm_gets_the_holders_of_each_device(ip):
    comm = open_comm("comm-1")
    assert holders(comm) == []  # no cell has ended with CUDA in use yet
    ip.run_cell(SETUP, store_history=True)
    [message] = holders(comm)
    validate(message)
    assert message["cell"] == ip.execution_count - 1 and not message["skipped"]
    [device] = message["devices"]
    entries = {e["name"]: e for e in device["entries"]}
    assert entries["losses"]["description"].startswith("list of 40 tensors with grad history; keeps 320 B alive")
    assert entries["losses"]["graph_bytes"] == 40 * 8  # each graph saved its multiplier (a 0-dim int64 tensor)
    assert entries["model"]["bytes"] == 4040 and "opt" in entries["model"]["shared_with"]
    assert device["device"] == "cpu" and device["allocated"] == ALLOCATED
    assert device["unreachable"] == ALLOCATED - device["reachable"]
    assert device["reachable"] == sum(e["bytes"] for e in device["entries"]) + device["more_bytes"]


def test_a_comm_opened_later_gets_the_last_cells_holders(ip):
    ip.run_cell(SETUP, store_history=True)
    comm = open_comm("comm-2")
    kinds = [m["type"] for m in comm.sent]
    assert kinds[:3] == ["hello", "history", "holders"]
    assert holders(comm)[0] == extension.current().holders.last_message()


def test_past_the_budget_the_message_is_a_skip_with_its_note():
    with fresh_shell() as shell:
        shell.run_cell("import torch\nmany = [[torch.ones(1)] for i in range(3000)]")
        report = collect.collect(shell, device="cpu", budget_ms=0.0)
    message = holders_message(report, {"cpu": ALLOCATED}, 7, 1.0e9).to_dict()
    validate(message)
    assert message["skipped"] and message["devices"] == [] and message["cell"] == 7
    assert message["note"].startswith("skipped: looking through your variables took over 0 ms")


def test_the_top_holders_per_device_and_the_rest_counted():
    with fresh_shell() as shell:
        shell.run_cell("import torch\n" + "\n".join(f"t{i} = torch.ones({100 * (i + 1)})" for i in range(7)))
        report = collect.collect(shell, device="cpu", budget_ms=None)
    message = holders_message(report, None, None, 1.0e9, top=5).to_dict()
    validate(message)
    [device] = message["devices"]
    assert [e["name"] for e in device["entries"]] == ["t6", "t5", "t4", "t3", "t2"]
    assert (device["more"], device["more_bytes"]) == (2, 400 * 2 + 400 * 1)
    assert device["allocated"] is None and device["unreachable"] is None
