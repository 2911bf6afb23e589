"""Activation checkpointing on the trace's copy: the repeated blocks a user means by "checkpoint the model", each
wrapped in non-reentrant checkpointing, and the KV cache turned off as Hugging Face does.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple


def _has_parameters(module: Any) -> bool:
    return any(True for _ in module.parameters())


def repeated_blocks(model: Any) -> List[Tuple[str, Any]]:
    """(name, module) of the blocks a user means by "checkpoint the model": children of ModuleList/Sequential
    containers, grouped by class. The group that wins is repeated, made of composite blocks rather than single
    layers or containers, and covers the most parameters: a ResNet's bottlenecks across all four stages, a
    transformer's layers. Blocks nested inside another of the group are left to it."""
    import torch

    containers = (torch.nn.ModuleList, torch.nn.Sequential)
    groups: Dict[type, Dict[int, Any]] = {}
    for container in model.modules():
        if isinstance(container, containers):
            for child in container.children():
                if _has_parameters(child):
                    groups.setdefault(type(child), {})[id(child)] = child
    if not groups:
        return []

    def score(item: Tuple[type, Dict[int, Any]]) -> Tuple[bool, bool, bool, int, int]:
        kind, members = item
        blocks = list(members.values())
        composite = any(True for b in blocks for _ in b.children())
        covered = {id(p): p.numel() for b in blocks for p in b.parameters()}
        return len(blocks) > 1, composite, not issubclass(kind, containers), sum(covered.values()), len(blocks)

    members = max(groups.items(), key=score)[1]
    nested = {id(m) for block in members.values() for m in block.modules() if m is not block}
    return [(name, m) for name, m in model.named_modules() if id(m) in members and id(m) not in nested]


def name_span(names: Sequence[str]) -> str:
    """['layer1.0', 'layer1.1', 'layer2.0'] -> 'layer1.0-1, layer2.0': consecutive indices of one parent."""
    runs: List[List[str]] = []  # [parent, first, last]
    for name in names:
        parent, _, index = name.rpartition(".")
        run = runs[-1] if runs else None
        if run and run[0] == parent and index.isdigit() and run[2].isdigit() and int(index) == int(run[2]) + 1:
            run[2] = index
        else:
            runs.append([parent, index, index])
    return ", ".join((f"{p}." if p else "") + (a if a == b else f"{a}-{b}") for p, a, b in runs)


def checkpoint_blocks(model: Any) -> List[str]:
    """Wrap every repeated block of the (copied) model in non-reentrant activation checkpointing, and turn a
    KV cache off as Hugging Face's gradient checkpointing does; returns what was done, for the report."""
    from torch.utils.checkpoint import checkpoint

    blocks = repeated_blocks(model)
    if not blocks:
        return ["checkpointing: no ModuleList/Sequential of blocks found; traced without it"]
    for _, block in blocks:
        inner = block.forward

        def forward(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        block.forward = forward
    kind = type(blocks[0][1]).__name__  # one class: repeated_blocks picks one group
    notes = [f"checkpointing: wrapped {len(blocks)} {kind} blocks ({name_span([n for n, _ in blocks])})"]
    if _disable_kv_cache(model):
        notes.append(
            "checkpointing: use_cache turned off on the copy, as Hugging Face's gradient checkpointing "
            "does (no KV cache kept through backward)"
        )
    return notes


def _disable_kv_cache(model: Any) -> bool:
    """config.use_cache = False on the copy's configs (a deep copy: the user's config keeps its value)."""
    changed = False
    for module in model.modules():
        config = getattr(module, "config", None)
        if getattr(config, "use_cache", None) is True:
            config.use_cache = False
            changed = True
    return changed
