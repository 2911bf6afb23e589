"""Snapshots of a user's model, optimizer and RNGs: what our tools must leave byte-identical."""

from __future__ import annotations

import random

import torch


def state_of(model, optimizer):
    """Everything that must come back byte-identical."""
    return {
        "params": {k: v.detach().clone() for k, v in model.named_parameters()},
        "buffers": {k: v.detach().clone() for k, v in model.named_buffers()},
        "grads": {k: None if v.grad is None else v.grad.clone() for k, v in model.named_parameters()},
        "training": [m.training for m in model.modules()],
        "opt": {
            i: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
            for i, s in enumerate(optimizer.state.values())
        }
        if optimizer is not None
        else {},
        "groups": [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups] if optimizer else [],
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
    }


def assert_same(before, after) -> None:
    for part in ("params", "buffers"):
        assert before[part].keys() == after[part].keys()
        for key in before[part]:
            assert torch.equal(before[part][key], after[part][key]), f"{part} {key} changed"
    for key, grad in before["grads"].items():
        assert (grad is None) == (after["grads"][key] is None)
        assert grad is None or torch.equal(grad, after["grads"][key]), f"grad {key} changed"
    assert before["training"] == after["training"]
    assert before["opt"].keys() == after["opt"].keys()
    for i, state in before["opt"].items():
        for key, value in state.items():
            other = after["opt"][i][key]
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other, f"optimizer {key}"
    assert before["groups"] == after["groups"]
    assert torch.equal(before["torch_rng"], after["torch_rng"])
    assert before["python_rng"] == after["python_rng"]
