"""On a real GPU, in a real kernel: the holders of CUDA memory, the path the other holders tests take on CPU
tensors through their test switch. A cell trains a model with an optimizer on cuda and keeps each loss with its
grad history; `%gpumem holders --json` names `losses`, `model` and `opt` with their CUDA bytes, and the panel's
`holders` message after that cell is valid under its schema (pytest -m gpu; skipped without one)."""

from __future__ import annotations

import json
from typing import Dict

import pytest

from gpumem_kernel.wire.protocol import validate
from kernel_harness import KernelHarness

pytestmark = [pytest.mark.gpu, pytest.mark.kernel]

PARAMETER_BYTES = (1024 * 1024 + 1024) * 4  # Linear(1024, 1024) in float32: weight and bias
CELL = """
import torch
model = torch.nn.Linear(1024, 1024).cuda()
opt = torch.optim.Adam(model.parameters())
losses = []
for _ in range(4):
    loss = model(torch.randn(64, 1024, device="cuda")).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(loss)  # the leak the holders name: each loss keeps its grad_fn
del loss
"""
# Adam's two moments per parameter; its step counters too where they live on the GPU (fused or capturable)
OPT_BYTES = range(2 * PARAMETER_BYTES, 2 * PARAMETER_BYTES + 2 * 8 + 1)


def printed(kernel: KernelHarness, code: str) -> str:
    start = len(kernel.messages())
    reply = kernel.execute(code)
    assert reply["status"] == "ok", reply
    return "".join(
        m.content.get("text", "")
        for m in kernel.messages()[start:]
        if m.parent_id == reply["msg_id"] and m.msg_type == "stream"
    )


def test_a_real_kernels_cuda_holders_are_named_with_their_bytes():
    with KernelHarness() as kernel:
        kernel.bootstrap()
        comm = kernel.open_comm({"type": "open", "protocol": 1})
        kernel.wait_comm(comm, "hello")
        start = len(kernel.messages())
        kernel.execute(CELL)
        message = kernel.wait_comm(comm, "holders", start=start)
        report = json.loads(printed(kernel, "%gpumem holders --json"))

    assert not report["skipped"], report["note"]
    entries: Dict[str, dict] = {e["name"]: e for e in report["entries"]}
    assert entries["model"]["bytes"] == PARAMETER_BYTES and entries["model"]["by_device"] == {"cuda:0": PARAMETER_BYTES}
    assert entries["opt"]["bytes"] in OPT_BYTES and "model" in entries["opt"]["shared_with"]
    assert entries["losses"]["description"] == "list of 4 tensors with grad history"
    assert entries["losses"]["bytes"] == 4 * 4 and entries["losses"]["by_device"] == {"cuda:0": 16}
    assert report["allocated"] >= report["reachable"] >= 3 * PARAMETER_BYTES + 16
    assert report["unreachable"] == report["allocated"] - report["reachable"] >= 0

    validate(message)
    assert not message["skipped"], message["note"]
    [device] = [d for d in message["devices"] if d["device"] == "cuda:0"]
    shown = {line["name"]: line["bytes"] for line in device["entries"]}
    assert shown == {"opt": entries["opt"]["bytes"], "model": PARAMETER_BYTES, "losses": 16}
    assert device["unreachable"] is not None and device["unreachable"] >= 0
