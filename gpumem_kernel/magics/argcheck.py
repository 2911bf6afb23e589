"""One check per kind of argument, shared by every `%gpumem` magic and `python -m gpumem_kernel`.

`--device` and the batch-size-like counts are argparse `type=` functions, so a bad value is argparse's one line
(`argument --device: ...`) wherever it is typed. Values echoed back in a message are cut (render.text.shown).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import re
from typing import Any, Callable, Collection, Iterable, List, Optional, Tuple

from gpumem_kernel.probe.inspection import is_fault, problem, type_name
from gpumem_kernel.render.text import shown

MAX_COUNT = 2**31 - 1  # no batch this large fits a device; 10**20 would overflow torch's int64 sizes
_INDEX = re.compile(r"(?:cuda:)?(\d+)\Z")


# --- counts ------------------------------------------------------------------------------------------------------


def count(text: str) -> int:
    """argparse type of a batch size (or another count of things): an integer from 1 to MAX_COUNT."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        value = 0
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to {MAX_COUNT}, got {shown(text)}")
    return value


def rounding(text: str) -> str:
    """argparse type of `--round`: pow2, none or N (a multiple of N), as analysis.picks reads it; the value
    normalised (`8`, `pow2`, `none`)."""
    from gpumem_kernel.analysis import parse_rounding

    try:
        return parse_rounding(text).code
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# --- devices -----------------------------------------------------------------------------------------------------

CPU, AUTO, CUDA, INDEX = "cpu", "auto", "cuda", "cuda:N"  # the forms a command may accept
_SPELLED = {CPU: ("cpu",), AUTO: ("auto",), CUDA: ("cuda",), INDEX: ("cuda:N", "N")}


def cuda_device_count() -> int:
    """How many `cuda:N` this kernel has, without creating a CUDA context: torch's own count once CUDA is
    initialised, else NVML's view through CUDA_VISIBLE_DEVICES (the sampler's latest sample when the extension
    is loaded: the shared prober is single-threaded and the sampler owns it); without NVML (ROCm, Jetson)
    torch's device_count, which asks NVML/amdsmi or the driver but creates no context (0 on a CPU build)."""
    from gpumem_kernel.probe.snapshot import latest_sample
    from gpumem_kernel.probe.torchstats import initialised_cuda, loaded_torch

    cuda = initialised_cuda()
    if cuda is not None:
        return int(cuda.device_count())
    gpu = latest_sample()["gpu"]
    if gpu["available"]:
        return sum(1 for device in gpu["devices"] if device["cuda_index"] is not None)
    torch = loaded_torch()
    try:
        return int(torch.cuda.device_count()) if torch is not None else 0
    except Exception:  # a broken driver: no device to name
        return 0


def _spelled(accept: Collection[str]) -> str:
    words = [word for form in (CPU, AUTO, CUDA, INDEX) if form in accept for word in _SPELLED[form]]
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]


def _sees(n: int) -> str:
    return "no CUDA device" if n == 0 else f"{n} CUDA device{'s' if n > 1 else ''}"


def check_device(text: str, accept: Collection[str]) -> str:
    """`text` as 'cpu', 'auto', 'cuda' or 'cuda:N' if it is a form in `accept` and names a device this kernel
    has; else a one-line ValueError. CUDA itself is never initialised here."""
    value = str(text).strip().lower()
    index = _INDEX.match(value)
    if index and INDEX in accept:
        value = f"cuda:{int(index.group(1))}"
    elif value not in accept:
        raise ValueError(f"expected {_spelled(accept)}, got {shown(text)}")
    if value.startswith(CUDA):
        available = cuda_device_count()
        if available <= (int(index.group(1)) if index else 0):
            raise ValueError(f"got {shown(text)}, but this kernel sees {_sees(available)}")
    return value


def device(*accept: str) -> Callable[[str], str]:
    """argparse type of `--device` accepting these forms (CPU, AUTO, CUDA, INDEX)."""

    def parse(text: str) -> str:
        try:
            return check_device(text, accept)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def device_index(value: Optional[str]) -> Optional[int]:
    """N of a checked 'cuda:N' (None stays None)."""
    return None if value is None else int(value.split(":", 1)[1])


# --- the user's objects ------------------------------------------------------------------------------------------

# The containers a batch (or a set of optimizers) is made of, which the engines walk to its leaves.
_BATCH_CONTAINERS = (tuple, list, dict, collections.deque)
CHECKED_ITEMS = 10_000  # objects looked at per argument: a list of a million samples must not stall the magic
CHECKED_DEPTH = 32  # no batch is nested deeper; the engines' own walks recurse per level


def user_object(value: Any, label: str, containers: bool = False) -> None:
    """A one-line ValueError when `value`, the user's object an argument names (`label`: "MODEL model"), cannot
    be inspected (probe.inspection.problem), so that our reading of it never ends in a traceback of ours. With
    `containers`, the elements of its tuples, lists and dicts are checked too, CHECKED_DEPTH levels down."""
    pending: List[Tuple[Any, str, int]] = [(value, label, 0)]
    for _ in range(CHECKED_ITEMS):
        if not pending:
            return
        obj, path, depth = pending.pop()
        reason = problem(obj)
        if reason is not None:
            raise ValueError(f"{path} could not be inspected ({reason})")
        if not containers or not issubclass(type(obj), _BATCH_CONTAINERS):
            continue
        if depth >= CHECKED_DEPTH:
            raise ValueError(f"{label} is nested more than {CHECKED_DEPTH} levels deep")
        pending.extend((item, f"{path}[{key}]", depth + 1) for key, item in _items(obj, path))


def _items(container: Any, path: str) -> List[Tuple[str, Any]]:
    """(shown key, value) of a container's first CHECKED_ITEMS elements; a ValueError when reading them raises."""
    try:
        pairs: Iterable[Tuple[Any, Any]] = (
            container.items() if issubclass(type(container), dict) else enumerate(container)
        )
        return [(_key(key), item) for key, item in itertools.islice(pairs, CHECKED_ITEMS)]
    except BaseException as error:
        if not is_fault(error):
            raise
        raise ValueError(f"{path} could not be inspected ({type_name(type(error))})") from None


def _key(key: Any) -> str:
    return shown(key) if type(key) in (int, str) else f"<{type_name(type(key))}>"
