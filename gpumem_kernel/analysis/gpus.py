"""Planning targets: a table of common NVIDIA GPUs, looked up by name or alias.

`memory_bytes` is the total memory nvidia-smi reports for the card (MiB figures), which is what a training
process can at most see; CUDA's own total (`torch.cuda.get_device_properties().total_memory`) is slightly lower
on data-center parts (ECC and driver reservations), which the context estimate and the safety reserve cover.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import asdict, dataclass
from typing import Dict, List, Mapping, Optional, Tuple, Union

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
    _spec("RTX 5080", 16303, "12.0", ("rtx 5080 16gb", "5080")),
    _spec("RTX 5090", 32607, "12.0", ("rtx 5090 32gb", "5090")),
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


@dataclass(frozen=True)
class BlasWorkspaces:
    """What PyTorch's cuBLAS handle pool takes from the caching allocator for a thread's matrix products.

    Read from CublasHandlePool.cpp and the libtorch_cuda binaries of torch 2.8 to 2.14 (their disassembly; the
    rules changed in 2.9 and 2.12), so the model follows the torch the user runs:
      cublas       each thread that runs a matmul (the forward thread, the autograd engine's) keeps one per stream;
      lt           cuBLASLt's own workspace, kept per thread from its first addmm with a bias (2.9 to 2.11: the
                   two pools are unified only on request; from 2.12 Lt shares the cuBLAS one unless told not to);
      lt_per_call  before 2.9, each such addmm allocates cuBLASLt's workspace for the call and frees it after.
    """

    cublas: int
    lt: int = 0
    lt_per_call: int = 0

    def plan_fields(self) -> Dict[str, int]:
        """The TracePlan fields of these sizes."""
        return {"cublas_bytes": self.cublas, "cublaslt_bytes": self.lt, "cublaslt_call_bytes": self.lt_per_call}


_CUBLAS_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8  # ':4096:2:16:8' = 8,519,680 B
_CUBLAS_LARGE = 4096 * 8 * 1024  # 32 MiB
_LT_DEFAULT_KIB = 1024


def torch_minor(version: Optional[str]) -> Tuple[int, int]:
    """'2.11.0+cu130' -> (2, 11); unknown or unreadable -> the newest rules."""
    match = re.match(r"(\d+)\.(\d+)", str(version or ""))
    return (int(match.group(1)), int(match.group(2))) if match else (99, 0)


def _flag(value: Optional[str]) -> Optional[bool]:
    """c10::utils::check_env: '1'/'true' on, '0'/'false' off, unset (or anything else) undecided."""
    text = (value or "").strip().lower()
    return True if text in ("1", "true") else False if text in ("0", "false") else None


def _cublas_default(compute_capability: Optional[str], torch: Tuple[int, int]) -> int:
    """32 MiB on sm_90 only up to 2.11; on majors 9, 10 and 12 in 2.12 and 2.13; on majors 9 to 12 from 2.14."""
    try:
        major, minor = (int(x) for x in str(compute_capability).split(".")[:2])
    except ValueError:
        return _CUBLAS_DEFAULT
    if torch < (2, 12):
        large = (major, minor) == (9, 0)
    elif torch < (2, 14):
        large = major in (9, 10, 12)
    else:
        large = 9 <= major <= 12
    return _CUBLAS_LARGE if large else _CUBLAS_DEFAULT


def blas_workspaces(
    compute_capability: Optional[str], torch_version: Optional[str] = None, environ: Optional[Mapping[str, str]] = None
) -> BlasWorkspaces:
    """The workspaces for a GPU generation and a torch version; CUBLAS_WORKSPACE_CONFIG (':SIZE_KiB:COUNT'
    pairs), CUBLASLT_WORKSPACE_SIZE (KiB) and TORCH_CUBLASLT_UNIFIED_WORKSPACE are read as torch reads them."""
    env = os.environ if environ is None else environ
    torch = torch_minor(torch_version)
    cublas = _cublas_default(compute_capability, torch)
    pairs = re.findall(r":([0-9]+):([0-9]+)", env.get("CUBLAS_WORKSPACE_CONFIG") or "")
    if pairs:
        cublas = sum(int(size) * 1024 * int(count) for size, count in pairs)
    unified = _flag(env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE"))
    if unified is None:
        unified = torch >= (2, 12)
    if unified:
        return BlasWorkspaces(cublas)
    lt = _LT_DEFAULT_KIB * 1024
    with_size = re.fullmatch(r"\s*([0-9]+)\s*", env.get("CUBLASLT_WORKSPACE_SIZE") or "")
    if with_size:
        lt = int(with_size.group(1)) * 1024
    if torch < (2, 9):
        return BlasWorkspaces(cublas, lt_per_call=lt)
    if torch < (2, 12) and _flag(env.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE")) is not False:
        lt = min(lt, cublas)  # 2.9-2.11 cap Lt at the cuBLAS size unless unification is refused outright
    return BlasWorkspaces(cublas, lt=lt)
