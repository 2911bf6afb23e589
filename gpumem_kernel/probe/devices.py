"""Which NVML devices this kernel's CUDA (torch's `cuda:N`) sees, and in what order.

CUDA numbers devices after applying CUDA_VISIBLE_DEVICES; NVML always lists every GPU in PCI bus order.
This module reproduces CUDA's parsing without calling CUDA (calling cuInit here would cost the user
a driver initialisation and, through torch, possibly a context).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, Sequence

PCI_BUS_ID = "PCI_BUS_ID"
FASTEST_FIRST = "FASTEST_FIRST"


@dataclass(frozen=True)
class MigInstance:
    """One MIG device (a slice of a physical GPU) as NVML reports it."""

    parent_index: int
    slot: int  # index for nvmlDeviceGetMigDeviceHandleByIndex
    uuid: str  # "MIG-<uuid>" (R470+ drivers)
    gpu_instance: Optional[int]
    compute_instance: Optional[int]


@dataclass(frozen=True)
class Visible:
    """A device CUDA exposes to this kernel; position in the visible list is its `cuda:N`."""

    nvml_index: int
    mig: Optional[MigInstance] = None


def device_order(env: Mapping[str, str]) -> str:
    """CUDA_DEVICE_ORDER as CUDA reads it: only "PCI_BUS_ID" changes the default.

    CUDA's default, FASTEST_FIRST, is treated as PCI bus order (NVML's order). That holds when all GPUs
    are the same model, the common case; on mixed machines CUDA may put the fastest GPU first, which only
    CUDA itself can tell, so the payload reports `device_order` for the UI to warn.
    """
    return PCI_BUS_ID if env.get("CUDA_DEVICE_ORDER", "").strip() == PCI_BUS_ID else FASTEST_FIRST


def _unique_prefix(token: str, uuids: Sequence[str]) -> Optional[int]:
    """Index of the one uuid that starts with `token` (CUDA accepts unambiguous prefixes)."""
    token = token.lower()
    matches = [i for i, uuid in enumerate(uuids) if uuid.lower().startswith(token)]
    return matches[0] if len(matches) == 1 else None


def _legacy_mig(token: str, gpu_uuids: Sequence[str], migs: Sequence[MigInstance]) -> Optional[MigInstance]:
    """Resolve the pre-R470 form "MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>"."""
    parts = token[len("MIG-") :].split("/")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    gpu = _unique_prefix(parts[0], gpu_uuids)
    gi, ci = int(parts[1]), int(parts[2])
    for mig in migs:
        if mig.parent_index == gpu and mig.gpu_instance == gi and mig.compute_instance == ci:
            return mig
    return None


def _resolve(token: str, gpu_uuids: Sequence[str], mig_list: Callable[[], Sequence[MigInstance]]) -> Optional[Visible]:
    """One CUDA_VISIBLE_DEVICES entry → a device, or None when CUDA would call it invalid."""
    if token.isdigit():
        index = int(token)
        return Visible(index) if index < len(gpu_uuids) else None
    upper = token.upper()
    if upper.startswith("GPU-"):
        match = _unique_prefix(token, gpu_uuids)
        return Visible(match) if match is not None else None
    if upper.startswith("MIG-GPU-"):
        mig = _legacy_mig(token, gpu_uuids, mig_list())
        return Visible(mig.parent_index, mig) if mig else None
    if upper.startswith("MIG-"):
        migs = mig_list()
        slot = _unique_prefix(token, [m.uuid for m in migs])
        return Visible(migs[slot].parent_index, migs[slot]) if slot is not None else None
    return None


def visible_devices(
    value: Optional[str],
    gpu_uuids: Sequence[str],
    mig_list: Callable[[], Sequence[MigInstance]] = lambda: (),
) -> List[Visible]:
    """The devices CUDA exposes, in `cuda:N` order, for a CUDA_VISIBLE_DEVICES value.

    `gpu_uuids` lists every GPU in NVML order; `mig_list` is called only when an entry names a MIG device
    (enumerating MIG slots costs NVML calls). Unset shows every GPU; an empty value hides them all; CUDA
    stops at the first entry it cannot parse or find, keeping those before it. A repeated device also
    ends the list (CUDA rejects duplicates).
    """
    if value is None:
        return [Visible(i) for i in range(len(gpu_uuids))]
    result: List[Visible] = []
    for raw in value.split(","):
        found = _resolve(raw.strip(), gpu_uuids, mig_list)
        if found is None or found in result:
            break
        result.append(found)
    return result
