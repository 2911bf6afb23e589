"""Planning targets: a table of common NVIDIA GPUs, looked up by name or alias.

`memory_bytes` is the total memory nvidia-smi reports for the card (MiB figures), which is what a training
process can at most see; CUDA's own total (`torch.cuda.get_device_properties().total_memory`) is slightly lower
on data-center parts (ECC and driver reservations), which the context estimate and the safety reserve cover.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple, Union

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    compute_capability: str
    bf16: bool
    aliases: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, object]:
        data = asdict(self)
        data["aliases"] = list(self.aliases)
        return data


def _spec(name: str, mib: int, cc: str, aliases: Tuple[str, ...] = ()) -> GpuSpec:
    major = int(cc.split(".")[0])
    return GpuSpec(name=name, memory_bytes=mib * MiB, compute_capability=cc, bf16=major >= 8, aliases=aliases)


GPUS: Tuple[GpuSpec, ...] = (
    _spec("RTX 2060", 6144, "7.5", ("rtx 2060 6gb", "2060")),
    _spec("RTX 3060", 12288, "8.6", ("rtx 3060 12gb", "3060")),
    _spec("RTX 4060 Ti 16GB", 16380, "8.9", ("rtx 4060 ti", "4060 ti", "4060ti", "4060 ti 16gb")),
    _spec("RTX 4080 Super", 16376, "8.9", ("rtx 4080 super", "4080 super", "4080s", "rtx 4080s")),
    _spec("RTX 3090", 24576, "8.6", ("rtx 3090 24gb", "3090")),
    _spec("RTX 4090", 24564, "8.9", ("rtx 4090 24gb", "4090")),
    _spec("T4", 15360, "7.5", ("tesla t4", "t4 16gb")),
    _spec("L4", 23034, "8.9", ("l4 24gb",)),
    _spec("A10", 23028, "8.6", ("a10 24gb", "a10g")),
    _spec("A100 40GB", 40960, "8.0", ("a100-sxm4-40gb", "a100-pcie-40gb", "a100 40g")),
    _spec("A100 80GB", 81920, "8.0", ("a100-sxm4-80gb", "a100-pcie-80gb", "a100 80gb pcie", "a100 80g")),
    _spec("H100 80GB", 81559, "9.0", ("h100", "h100 sxm", "h100 80gb hbm3", "h100 pcie", "h100-sxm5-80gb")),
    _spec("H200", 143771, "9.0", ("h200 141gb", "h200 sxm", "h200 nvl")),
)


def _normal(name: str) -> str:
    """'NVIDIA GeForce RTX 4080 SUPER' -> 'rtx4080super': vendor words and punctuation do not matter."""
    text = name.lower()
    for word in ("nvidia", "geforce", "tesla"):
        text = text.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", text)


def _index() -> Dict[str, GpuSpec]:
    index: Dict[str, GpuSpec] = {}
    for spec in GPUS:
        for key in (spec.name,) + spec.aliases:
            index[_normal(key)] = spec
    return index


_INDEX = _index()
_FORM_FACTOR = re.compile(r"(sxm\d?|pcie|\d+gb|hbm\de?|nvl|gpu)*")


def lookup(name: str) -> GpuSpec:
    """The table entry for a GPU name, alias or NVML name; ValueError (one line, with close names) otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("GPU name must be a non-empty string, e.g. 'RTX 4080 Super'")
    key = _normal(name)
    if key in _INDEX:
        return _INDEX[key]
    if key == "a100":
        raise ValueError("ambiguous GPU 'A100': say 'A100 40GB' or 'A100 80GB'")
    # NVML names carry form factors ("A100-SXM4-80GB", "H100 80GB HBM3"): accept a unique entry whose
    # normalised name is a prefix followed only by such words, and whose memory size (if named) agrees.
    size = re.search(r"(\d+)gb", key)
    hits = {
        spec
        for k, spec in _INDEX.items()
        if len(k) >= 2
        and key.startswith(k)
        and _FORM_FACTOR.fullmatch(key[len(k) :])
        and (size is None or round(spec.memory_bytes / GiB) in (int(size.group(1)), int(size.group(1)) - 1))
    }
    if len(hits) == 1:
        return hits.pop()
    close = difflib.get_close_matches(key, list(_INDEX), n=4, cutoff=0.5)
    names = sorted({_INDEX[k].name for k in close}) or [spec.name for spec in GPUS]
    raise ValueError(f"unknown GPU {name!r}; close names: {', '.join(names)}")


def names() -> List[str]:
    return [spec.name for spec in GPUS]


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 10**6,
    "mb": 10**6,
    "mib": MiB,
    "g": 10**9,
    "gb": 10**9,
    "gib": GiB,
    "t": 10**12,
    "tb": 10**12,
    "tib": 1 << 40,
}


def parse_memory(value: Union[int, float, str]) -> int:
    """16 * 2**30, '16GiB', '16 GB' (decimal, as vendors write it), '16000MiB' -> bytes; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"memory must be bytes or a size such as '16GiB', not {value!r}")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot read memory size {value!r}; write e.g. '16GiB' or '24GB'")
        number, unit = float(match.group(1)), match.group(2).lower()
    result = int(number * _UNITS[unit])
    if result <= 0:
        raise ValueError(f"memory size must be positive, got {value!r}")
    return result


def context_estimate(compute_capability: Optional[str]) -> int:
    """Typical CUDA context + kernel images of a PyTorch process (lazy module loading), by GPU generation.

    Measured contexts of recent PyTorch/CUDA 12 builds are ~0.3–0.6 GiB; newer generations load larger
    kernel images. An estimate, and labelled as one wherever it is shown.
    """
    try:
        major = int(str(compute_capability).split(".")[0])
    except ValueError:
        return 512 * MiB
    if major < 7:
        return 320 * MiB
    if major == 7:
        return 384 * MiB
    if major == 8:
        return 448 * MiB
    return 544 * MiB


def cublas_workspace_bytes(compute_capability: Optional[str], env_config: Optional[str] = None) -> int:
    """cuBLAS workspace PyTorch allocates per (handle, stream), from aten/src/ATen/cuda/CublasHandlePool.cpp.

    Default ':4096:2:16:8' = 4096 KiB x 2 + 16 KiB x 8 = 8,519,680 B; 32 MiB on sm_90 (Hopper).
    `CUBLAS_WORKSPACE_CONFIG` (':SIZE_KiB:COUNT' pairs) overrides both.
    """
    if env_config:
        pairs = re.findall(r":([0-9]+):([0-9]+)", env_config)
        if pairs:
            return sum(int(size) * 1024 * int(count) for size, count in pairs)
    if str(compute_capability) == "9.0":
        return 4096 * 8 * 1024
    return 4096 * 1024 * 2 + 16 * 1024 * 8
