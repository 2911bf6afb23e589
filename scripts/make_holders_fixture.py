"""Regenerate the panel's "Held by" fixture (src/__tests__/data/holders_cpu.json): the `holders` message the kernel
sends after a cell, from a real walk of an in-process IPython shell's variables on CPU tensors (the holders' test
switch), with the device named cuda:0 as on a GPU. Run from the repository root:

    PYTHONPATH=.:tests .venv/bin/python scripts/make_holders_fixture.py
"""

import json
import os

from gpumem_kernel.heldby import collect, hook
from gpumem_kernel.wire.protocol import validate
from ipython_shell import fresh_shell

OUT = os.path.join(os.path.dirname(__file__), "..", "src", "__tests__", "data", "holders_cpu.json")
ALLOCATED = 48 * 1024**2  # what the allocator would say: the walk reaches less (autograd graphs, caches)
CELLS = [
    "import torch\n"
    "model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 10))\n"
    "opt = torch.optim.Adam(model.parameters())\n"
    "model(torch.randn(8, 512)).sum().backward(); opt.step()\n"
    "w = torch.ones(256, 256, requires_grad=True)\n"
    "losses = [w * i for i in range(40)]  # each keeps its autograd graph\n"
    "batch = {'x': torch.randn(64, 512), 'y': torch.zeros(64, dtype=torch.long)}\n"
    "scale = torch.ones(10)",
    "torch.zeros(256, 512)",  # ends in a value: IPython's output cache holds it
]

on_cpu = (lambda tensor: tensor.device.type == "cpu"), ALLOCATED
collect.cuda_in_use = lambda: on_cpu
hook.cuda_in_use = lambda: on_cpu
hook.allocated_by_device = lambda: {"cpu": ALLOCATED}
with fresh_shell() as shell:
    last = hook.LastHolders()
    for cell in CELLS:
        result = shell.run_cell(cell, store_history=True)
        hook.HoldersHook(shell, last).after_cell(result)  # what the extension's cell-end step runs
    message = last.last_message()
assert message is not None and not message["skipped"], message
for device in message["devices"]:
    device["device"] = "cuda:0"
validate(message)
with open(OUT, "w") as f:
    json.dump(message, f, indent=1)
    f.write("\n")
print(OUT, [(e["name"], e["bytes"]) for e in message["devices"][0]["entries"]], message["devices"][0]["more"])
