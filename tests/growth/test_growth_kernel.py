"""A cell re-run in a real ipykernel that keeps each loss with its autograd graph gets the growth notice, in its
output and on the comm. CPU tensors stand in for CUDA ones through the holders' test switch (cuda_in_use), and
the C allocator's bytes in use stand in for allocated (growth.memory)."""

from __future__ import annotations

import re

import pytest

from gpumem_kernel.wire.protocol import validate
from kernel_harness import KernelHarness, torch_in_kernel_python


pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not torch_in_kernel_python(), reason="torch is not installed for the kernel's Python"),
]

SWITCH = (
    "import gpumem_kernel.heldby.collect as _collect, gpumem_kernel.heldby.hook as _hook\n"
    "_on_cpu = ((lambda tensor: tensor.device.type == 'cpu'), 0)\n"
    "_collect.cuda_in_use = _hook.cuda_in_use = lambda: _on_cpu\n"
)
SETUP = (
    "import torch\n"
    "model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))\n"
    "x = torch.randn(1024, 256)\n"
    "losses = []\n"
)
LEAK = "losses.append(model(x).sum())"  # each loss keeps its graph: the 1024 x 1024 activations, 4 MiB a run


def _outputs(kernel: KernelHarness, msg_id: str) -> list:
    return [
        r.content["data"]["text/plain"]
        for r in kernel.messages()
        if r.parent_id == msg_id and r.msg_type == "display_data"
    ]


def test_a_cell_that_keeps_losses_with_their_graphs_is_named_after_its_third_run():
    with KernelHarness() as kernel:
        kernel.bootstrap()
        comm_id = kernel.open_comm({"type": "open", "protocol": 1, "interval": 10.0, "client": "test"})
        kernel.wait_comm(comm_id, "hello")
        for code in (SWITCH, SETUP):
            assert kernel.execute(code)["status"] == "ok"
        shown = []
        for _ in range(4):
            content = kernel.execute(LEAK)
            assert content["status"] == "ok", content
            shown.append(_outputs(kernel, content["msg_id"]))
        message = kernel.wait_comm(comm_id, "growth", where=lambda d: d["rerun"] is not None)

    assert shown[0] == [] and shown[1] == []  # two runs say nothing yet
    headline, grew, fix = shown[3][0].splitlines()
    assert re.fullmatch(r"Cell \[\d+\] leaves \+4\.0\d MiB allocated on cpu after each run \([34] runs\)", headline)
    assert grew.startswith("  grew since the last run: `losses` +1 tensor, +4 B (now list of 4 tensors with grad")
    assert fix.startswith("  fix: append `loss.item()` (a Python number) to `losses`")
    validate(message)
    rerun = message["rerun"]
    assert rerun["pattern"] == "loss_with_graph" and rerun["runs"] >= 3, (rerun, shown)
    assert rerun["holders"][0]["name"] == "losses"
    assert 4 << 20 <= rerun["step"] < 5 << 20


def test_a_cell_that_keeps_cpu_tensors_in_a_global_list_grows_the_rss_notice():
    """No device memory in use (no switch): the kernel's RSS is what grows, and the notice says so in RSS."""
    with KernelHarness() as kernel:
        kernel.bootstrap()
        comm_id = kernel.open_comm({"type": "open", "protocol": 1, "interval": 10.0, "client": "test"})
        kernel.wait_comm(comm_id, "hello")
        assert kernel.execute("import torch\nkept = []\n")["status"] == "ok"
        shown = []
        for _ in range(5):  # the first run may reuse pages the kernel freed before
            content = kernel.execute("kept.append(torch.ones(4 << 20))")  # 16 MiB a run, its pages written
            assert content["status"] == "ok", content
            shown.append(_outputs(kernel, content["msg_id"]))
        message = kernel.wait_comm(comm_id, "growth", where=lambda d: d["rerun"] is not None)

    headline = next(texts[0] for texts in shown if texts).splitlines()[0]
    assert re.fullmatch(r"Cell \[\d+\] grows this kernel's RSS by \+1\d\.\d\d MiB each run \(3 runs\).*", headline)
    validate(message)
    rerun = message["rerun"]
    assert rerun["device"] == "host" and rerun["pattern"] is None and "`kept`" in rerun["fix"]
    assert 15 << 20 <= rerun["step"] < 20 << 20
