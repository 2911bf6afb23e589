"""Losses kept with their autograd graph (`losses.append(loss)`, no `.item()`) keep the step's activations alive
through the tensors their `grad_fn`s saved for backward: the holders, the clear and the remainder "not reachable
from your variables" say how much, apart from the few bytes of the losses themselves. Real torch on the CPU
(the holders' test switch: CPU tensors stand in for CUDA ones)."""

from __future__ import annotations

import types
from typing import Any, Dict, List, Tuple

import jsonschema
import pytest

torch = pytest.importorskip("torch")

from gpumem_kernel.clear.reclaim import CLEAR_MIME, clear_bundle, clear_gpu_memory  # noqa: E402
from gpumem_kernel.heldby.collect import collect  # noqa: E402
from gpumem_kernel.heldby.message import holders_message  # noqa: E402
from gpumem_kernel.heldby.walk import Limits, Walker  # noqa: E402
from gpumem_kernel.probe.holders import torch_kinds  # noqa: E402
from gpumem_kernel.wire.protocol import load_payload_schema, validate  # noqa: E402

STEPS = 79
WIDE = 2048  # the hidden activation each step saves for backward: 32 × 2048 floats = 256 KiB
TOLERANCE = 0.01  # the walk's figure is within 1 % of what the saved-tensor hooks saw


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, WIDE), torch.nn.ReLU(), torch.nn.Linear(WIDE, 1))


def kept_losses(model: torch.nn.Module) -> Tuple[List[Any], int]:
    """STEPS losses kept with their graphs, and the bytes their graphs saved for backward, counted independently:
    every tensor autograd packs (saved_tensors_hooks), each storage once, the model's parameters left out
    (the model holds those itself)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: Dict[int, int] = {}

    def pack(tensor: Any) -> Any:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    losses = []
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        for _ in range(STEPS):
            losses.append(model(torch.randn(32, 16)).pow(2).mean())
    return losses, sum(saved.values())


def shell_with(**user_ns: Any) -> Any:
    return types.SimpleNamespace(user_ns=dict(user_ns), user_ns_hidden={})


def holders_entry(shell: Any, name: str, allocated: int = 0) -> Any:
    report = collect(shell, device="cpu", allocated=allocated or None, budget_ms=None)
    return report, next(entry for entry in report.entries if entry.name == name)


def test_losses_kept_with_their_graphs_report_what_the_graphs_keep_alive():
    model = mlp()
    losses, saved = kept_losses(model)
    assert saved > STEPS * 32 * WIDE * 4  # at least every step's hidden activation

    report, entry = holders_entry(shell_with(model=model, losses=losses), "losses", allocated=4 * saved)

    assert entry.bytes == STEPS * 4  # the 79 scalar losses themselves
    assert abs(entry.graph_bytes - saved) <= TOLERANCE * saved
    assert "alive through autograd graphs — store `loss.item()`" in entry.description
    assert "autograd graphs kept by `losses`" in str(report)  # the remainder says whose graphs are in it
    message = holders_message(report, {"cpu": 4 * saved}, cell=1, now=0.0).to_dict()
    validate(message)
    (device,) = message["devices"]
    line = next(line for line in device["entries"] if line["name"] == "losses")
    assert line["graph_bytes"] == entry.graph_bytes and device["graph_bytes"] == entry.graph_bytes


def test_losses_stored_as_numbers_or_detached_keep_no_graph():
    model = mlp()
    losses, _ = kept_losses(model)
    numbers = [loss.item() for loss in losses]
    detached = [loss.detach() for loss in losses]
    del losses

    report, entry = holders_entry(shell_with(model=model, numbers=numbers, detached=detached), "detached")

    assert entry.graph_bytes == 0 and "autograd graphs" not in entry.description
    assert [e.name for e in report.entries if e.name == "numbers"] == []  # floats hold no tensor


def test_a_graph_freed_by_backward_keeps_nothing():
    model = mlp()
    loss = model(torch.randn(32, 16)).pow(2).mean()
    loss.backward()  # frees the saved tensors: reading them raises, which the walk treats as none

    _, entry = holders_entry(shell_with(model=model, loss=loss), "loss")

    assert entry.graph_bytes == 0


def test_the_clear_names_what_deleting_the_losses_frees_through_their_graphs():
    model = mlp()
    losses, saved = kept_losses(model)
    shell = shell_with(model=model, losses=losses)

    report = clear_gpu_memory(shell, dry_run=True, variables=["losses"])

    (deleted,) = report.deleted
    assert abs(deleted.graph_bytes - saved) <= TOLERANCE * saved
    bundle = clear_bundle(report)
    jsonschema.Draft202012Validator(load_payload_schema("clear")).validate(bundle[CLEAR_MIME])
    assert "its autograd graphs kept alive" in bundle["text/plain"]

    still = clear_gpu_memory(shell, dry_run=True)  # nothing deleted: `losses` still holds its graphs
    kept = next(h for h in still.holders if h.name == "losses")
    assert abs(kept.graph_bytes - saved) <= TOLERANCE * saved
    assert "alive through autograd graphs" in clear_bundle(still)["text/plain"]


def test_the_node_budget_bounds_a_long_graph():
    x = torch.ones(4, requires_grad=True)
    for _ in range(500):
        x = x * 1.0001  # 500 nodes in a chain
    walker = Walker(torch_kinds(), lambda t: True, Limits(graph_nodes=100), None)

    walker.reach([x])

    assert walker.graph_truncated and walker.graph_nodes == 100


def test_the_oom_checklists_what_to_free_note_names_what_the_graphs_keep(monkeypatch):
    from gpumem_kernel.heldby import collect as collect_module
    from gpumem_kernel.oom.namespace import variables_note

    model = mlp()
    losses, saved = kept_losses(model)
    monkeypatch.setattr(collect_module, "cuda_in_use", lambda: ((lambda tensor: tensor.device.type == "cpu"), 0))

    note = variables_note(shell_with(model=model, losses=losses))

    assert note is not None and "`losses` 316 B (and " in note and "through its autograd graphs)" in note
