"""Turning a command's words into the user's objects: the model, a sample or batch function, a loss, an
optimizer (a kind or the user's own), and checking shapes, memory sizes and GPU names before an engine runs."""

from __future__ import annotations

import re
from typing import Any, Optional

from gpumem_kernel.analysis import OPTIMIZER_ALIASES, OPTIMIZERS
from gpumem_kernel.magics import argcheck
from gpumem_kernel.magics.parsing import usage_error
from gpumem_kernel.probe.inspection import is_fault, type_name
from gpumem_kernel.probe.torchstats import loaded_torch
from gpumem_kernel.render.text import shown


_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\Z")


def lookup(shell: Any, name: str, command: str, what: str, containers: bool = False) -> Any:
    """`name` or `name.attr.attr` in the user's namespace; one line (never a traceback) when it is missing or
    cannot be inspected (with `containers`, nor the elements it is made of: argcheck.user_object)."""
    if not _NAME.match(name):
        raise usage_error(command, f"{what} {shown(name)}: not a variable name")
    head, *attributes = name.split(".")
    if head not in shell.user_ns:
        raise usage_error(command, f"{what}: no variable named {head!r} in this kernel")
    value, path = shell.user_ns[head], head
    for attribute in attributes:
        value, path = _attribute(value, path, attribute, command, what), f"{path}.{attribute}"
    try:
        argcheck.user_object(value, f"{what} {name}", containers)
    except ValueError as error:
        raise usage_error(command, str(error)) from None
    return value


def _attribute(value: Any, path: str, attribute: str, command: str, what: str) -> Any:
    try:
        return getattr(value, attribute)
    except AttributeError:
        raise usage_error(command, f"{what}: {path} has no attribute {attribute!r}") from None
    except BaseException as error:
        if not is_fault(error):
            raise
        reading = f"{what}: reading {path}.{attribute} raised {type_name(type(error))}"
        raise usage_error(command, reading) from None


def resolve_module(shell: Any, name: str, command: str) -> Any:
    value = lookup(shell, name, command, "MODEL")
    torch = loaded_torch()
    if torch is None or not issubclass(type(value), torch.nn.Module):  # by type: a Mock's __class__ may say Module
        raise usage_error(command, f"{name} is a {type_name(type(value))}, not a torch.nn.Module")
    return value


def resolve_input(shell: Any, text: Optional[str], command: str) -> Any:
    """A shape string (checked here), or the value of a variable: a sample tensor/tuple/dict or a function
    batch_size -> batch."""
    if text is None:
        return None
    if _NAME.match(text):
        head = text.split(".")[0]
        if head not in shell.user_ns:
            raise usage_error(
                command,
                f"--input {text!r}: no variable of that name in this kernel, and not a shape such as 3x224x224 or 512",
            )
        return lookup(shell, text, command, "--input", containers=True)
    from gpumem_kernel.analysis import parse_shape

    try:
        parse_shape(text)
    except ValueError as exc:
        raise usage_error(command, f"--input: {exc}") from None
    return text


def _function(shell: Any, name: Optional[str], command: str, option: str, wanted: str) -> Any:
    """The user's function a name holds, or one line saying what it holds instead."""
    if name is None:
        return None
    value = lookup(shell, name, command, option)
    if not callable(value):
        raise usage_error(
            command, f"{option} {name}: a {type_name(type(value))} is not callable; pass a function {wanted}"
        )
    return value


def resolve_loss(shell: Any, name: Optional[str], command: str) -> Any:
    return _function(shell, name, command, "--loss", "(output, batch) -> scalar loss")


def resolve_step(shell: Any, name: Optional[str], command: str) -> Any:
    return _function(shell, name, command, "--step", "(model, optimizer, batch)")


def resolve_optimizer(shell: Any, text: str, command: str, several: bool = False) -> Any:
    """adamw | adam | sgd | sgd-momentum, or the name of the user's torch.optim.Optimizer; with `several` (a
    step of the user's own) also a tuple, list or dict of them."""
    key = text.lower().replace("_", "-")
    key = OPTIMIZER_ALIASES.get(key, key)
    if key in OPTIMIZERS:
        return key
    if _NAME.match(text) and text.split(".")[0] in shell.user_ns:
        value = lookup(shell, text, command, "--optimizer", containers=several)
        torch = loaded_torch()
        cls = type(value)  # by type, here and below: a Mock's __class__ may say Optimizer
        values = list(value) if several and issubclass(cls, (tuple, list)) else [value]
        if several and issubclass(cls, dict):
            values = list(value.values())
        if torch is None or not values or not all(issubclass(type(v), torch.optim.Optimizer) for v in values):
            wanted = "torch.optim.Optimizer (or a tuple, list or dict of them)" if several else "torch.optim.Optimizer"
            raise usage_error(command, f"--optimizer {text}: a {type_name(cls)}, not a {wanted}")
        return value
    raise usage_error(
        command, f"--optimizer {text!r}: use {', '.join(OPTIMIZERS)} or the name of your optimizer variable"
    )


def resolve_amp(value: Optional[str]) -> Optional[str]:
    return None if value in (None, "off") else value


def resolve_memory(value: Optional[str], option: str, command: str) -> Optional[str]:
    if value is None:
        return None
    from gpumem_kernel.analysis import parse_memory

    try:
        parse_memory(value)
    except ValueError as exc:
        raise usage_error(command, f"{option}: {exc}") from None
    return value


def resolve_target(value: Optional[str], command: str) -> Optional[str]:
    if value is None:
        return None
    from gpumem_kernel.analysis import gpu_lookup

    try:
        gpu_lookup(value)
    except ValueError as exc:
        raise usage_error(command, f"--target: {exc}") from None
    return value
