"""Where an older torch keeps other tensors than the running one: named rules, each with its source, the torch
versions it names, and how the trace applies it (`--torch 1.10`: plan for the torch a run will use).

A trace runs on the kernel's torch. A rule applies when the planned torch is on the old side of the change and
the running torch on the new side (a running torch on the old side already behaves so itself). Never a factor:
each rule makes the trace keep the tensors that torch kept.

Read through 2.15 (KNOWN_THROUGH). 2.14 and 2.15 add no rule: nothing they changed alters what autograd, autocast
or the caching allocator keeps, as read from PyPI's wheels (torch-2.14.1 and torch-2.15.0, manylinux x86-64)
against 2.13.0's:
- autocast: ATen/autocast_mode.h (the per-device lower-precision and fp32 op lists, the cache) and torch/amp/ are
  the same in all three but for a message's wording;
- autograd: torch/autograd/ and torch/utils/checkpoint.py change typing, messages and, in 2.15, selective
  checkpointing saves the output of an op with an ordered effect (torch.library effects) instead of replaying it,
  which no op of a training step has (c10d collectives are left out of that);
- allocator: c10/cuda/CUDAAllocatorConfig.h and CUDACachingAllocator.h add, in 2.15, a per-stream-class size for
  expandable segments' virtual-address reservation (expandable_segments_reserve[_by_class], off unless set: it
  reserves address space, not memory) and user metadata on memory-history entries; the defaults
  (expandable_segments off, rounding, garbage collection) are unchanged;
- torch.nn.functional / torch.optim: typing and checks; linear_cross_entropy's chunked path is opt-in.
A planned torch newer than KNOWN_THROUGH is planned as the newest known one behaves, said in a note.

torch is imported inside functions only: the kernel shim must load without it."""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Tuple

Version = Tuple[int, int]
Window = Tuple[Version, Version]  # [from, until)


@dataclass(frozen=True)
class TorchRule:
    name: str
    changed_in: Version  # the first torch with the new behaviour; the rule applies to versions before it
    source: str
    old: str  # what torch kept before the change
    applied: str  # how the trace applies it
    since: Version = (0, 0)  # the first torch that behaved so
    # every window of torch versions that behave as the rule says (a running torch there needs no rule)
    also: Tuple[Window, ...] = ()

    def names(self, version: Version) -> bool:
        return self.since <= version < self.changed_in

    def behaves_so(self, version: Version) -> bool:
        return self.names(version) or any(lo <= version < hi for lo, hi in self.also)


SOFTMAX_SAVES_INPUT = TorchRule(
    "softmax-saves-input",
    (1, 11),
    "https://github.com/pytorch/pytorch/pull/65242",
    "softmax and log_softmax saved their input for backward as well as their output (issue #64000)",
    "softmax / log_softmax (torch, Tensor, nn.functional) keep the caller's input alive until their backward",
)
# PR 113685 (2.2) stopped caching under no_grad; PR 165068 (merged 2025-12-10, first in 2.11 as taken here: not
# checked against a release tag) caches there again, so 2.11+ behave as before 2.2
_CACHES_AGAIN: Window = ((2, 11), (99, 0))
AUTOCAST_CACHE_NO_GRAD = TorchRule(
    "autocast-cache-under-no-grad",
    (2, 2),
    "https://github.com/pytorch/pytorch/pull/113685",
    "autocast cached each weight's low-precision cast under no_grad too, until the autocast region exited",
    "a weight's low-precision cast made under no_grad and autocast stays alive until autocast exits",
    also=(_CACHES_AGAIN,),
)
AUTOCAST_NO_CACHE_NO_GRAD = TorchRule(
    "autocast-no-cache-under-no-grad",
    _CACHES_AGAIN[0],
    "https://github.com/pytorch/pytorch/pull/165068",
    "autocast did not cache casts under no_grad (PR 113685, 2.2) until PR 165068 cached them again",
    "the evaluation step runs with autocast's cache off (torch.set_autocast_cache_enabled(False))",
    since=(2, 2),
)
RMS_NORM_FP32 = TorchRule(
    "rms-norm-not-fp32-autocast",
    (2, 12),
    "https://github.com/pytorch/pytorch/pull/174824",
    "CUDA autocast left rms_norm in the low precision (it joined the fp32 list in 2.12)",
    "autocast_policy.FP32_SINCE: rms_norm is not cast up to fp32",
)
RULES: Tuple[TorchRule, ...] = (SOFTMAX_SAVES_INPUT, AUTOCAST_CACHE_NO_GRAD, AUTOCAST_NO_CACHE_NO_GRAD, RMS_NORM_FP32)
# the newest torch whose changes the rules above were checked against (the module docstring says how)
KNOWN_THROUGH: Version = (2, 15)


def parse(text: Optional[str]) -> Optional[Version]:
    """'1.10', '1.10.1+cu113', '2.2' -> (major, minor); anything else -> None."""
    match = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.\d+)?(?:[a-z]+\d*)?(?:\+\S+)?\s*", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def running() -> Version:
    import torch

    return parse(str(torch.__version__).split("+")[0]) or (99, 0)


@dataclass(frozen=True)
class Planned:
    """The torch a trace plans for and the rules that make it differ from the running one."""

    version: Version
    text: str  # '1.10' as planned, or the running torch's version
    rules: Tuple[TorchRule, ...]
    notes: Tuple[str, ...]

    def has(self, rule: TorchRule) -> bool:
        return rule in self.rules


def resolve(text: Optional[str]) -> Planned:
    """The planned torch: `text` if readable, else the running torch, said in a note."""
    now = running()
    version = parse(text)
    notes: List[str] = []
    if text is not None and version is None:
        notes.append(f"torch version {text!r} not understood: planned for the running torch {now[0]}.{now[1]}")
    if version is None:
        return Planned(now, f"{now[0]}.{now[1]}", (), tuple(notes))
    rules = tuple(r for r in RULES if r.names(version) and not r.behaves_so(now))
    if version > KNOWN_THROUGH:
        known = f"{KNOWN_THROUGH[0]}.{KNOWN_THROUGH[1]}"
        notes.append(
            f"torch {version[0]}.{version[1]} is newer than the torch rules know ({known}): planned as {known}"
        )
    notes += [f"torch {version[0]}.{version[1]}: rule {r.name} ({r.old}; {r.source})" for r in rules]
    return Planned(version, f"{version[0]}.{version[1]}", rules, tuple(notes))


# --- how the trace applies them ------------------------------------------------------------------------------


class _Nesting(threading.local):
    depth = 0


_NESTING = _Nesting()


def _keep_input_class() -> type:
    import torch

    class KeepInput(torch.autograd.Function):
        """The softmax output, unchanged (an alias), with the softmax input saved until this node's backward:
        autograd frees saved tensors when the node runs, as it freed the old softmax's `self`."""

        @staticmethod
        def forward(ctx: Any, output: Any, kept: Any) -> Any:
            ctx.save_for_backward(kept)
            return output.view_as(output)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return grad, None

    return KeepInput


def _keeping_input(original: Any, keep: Any) -> Any:
    import torch

    @functools.wraps(original)
    def softmax(input: Any, *args: Any, **kwargs: Any) -> Any:
        if _NESTING.depth:  # F.softmax calls Tensor.softmax: keep the outermost caller's input once
            return original(input, *args, **kwargs)
        _NESTING.depth += 1
        try:
            out = original(input, *args, **kwargs)
        finally:
            _NESTING.depth -= 1
        if torch.is_grad_enabled() and isinstance(input, torch.Tensor) and input.requires_grad:
            return keep.apply(out, input)
        return out

    return softmax


def softmax_swaps() -> List[Tuple[Any, str, Any]]:
    import torch
    import torch.nn.functional as F

    keep = _keep_input_class()
    return [
        (owner, name, _keeping_input(getattr(owner, name), keep))
        for owner in (F, torch, torch.Tensor)
        for name in ("softmax", "log_softmax")
    ]


@contextlib.contextmanager
def _autocast_cache_under_no_grad() -> Iterator[None]:
    """A TorchDispatchMode that holds each low-precision cast of an fp32 leaf that requires grad (a weight) made
    under no_grad inside autocast, released when autocast clears its cache (its outermost exit)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    low = (torch.float16, torch.bfloat16)
    held: List[Any] = []

    class HoldCasts(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            kwargs = kwargs or {}
            if (
                func.overloadpacket.__name__ == "_to_copy"
                and kwargs.get("dtype") in low
                and not torch.is_grad_enabled()
                and args
                and getattr(args[0], "dtype", None) == torch.float32
                and args[0].requires_grad
                and args[0].is_leaf
            ):
                held.append(out)
            return out

    clear = torch.clear_autocast_cache

    def clear_all() -> None:
        held.clear()
        clear()

    try:
        torch.clear_autocast_cache = clear_all
        with HoldCasts():
            yield
    finally:
        torch.clear_autocast_cache = clear
        held.clear()


@contextlib.contextmanager
def applied(planned: Optional[Planned], evaluation: bool = False) -> Iterator[None]:
    """The planned torch's rules for the length of a trace; enter after the tracker (a dispatch mode above it).
    RMS_NORM_FP32 is applied by autocast_policy.swaps, which takes the planned version."""
    from gpumem_kernel.analysis.fake.autocast_policy import swapped

    with contextlib.ExitStack() as stack:
        if planned is not None and planned.has(SOFTMAX_SAVES_INPUT):
            stack.enter_context(swapped(softmax_swaps()))
        if planned is not None and planned.has(AUTOCAST_CACHE_NO_GRAD):
            stack.enter_context(_autocast_cache_under_no_grad())
        if planned is not None and planned.has(AUTOCAST_NO_CACHE_NO_GRAD) and evaluation:
            stack.enter_context(_autocast_cache_off())
        yield


@contextlib.contextmanager
def _autocast_cache_off() -> Iterator[None]:
    """The evaluation step runs wholly under no_grad: autocast regions entered in it read this flag."""
    import torch

    previous = torch.is_autocast_cache_enabled()
    try:
        torch.set_autocast_cache_enabled(False)
        yield
    finally:
        torch.set_autocast_cache_enabled(previous)
