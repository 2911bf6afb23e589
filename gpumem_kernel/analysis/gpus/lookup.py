"""Planning targets: the GPUs of gpu_table.py, looked up by name, alias or NVML name.

`memory_bytes` is the total memory nvidia-smi reports for the card (MiB figures), which is what a training
process can at most see; CUDA's own total (`torch.cuda.get_device_properties().total_memory`) is slightly lower
on data-center parts (ECC and driver reservations), which the context estimate and the safety reserve cover.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple, Union

from gpumem_kernel.analysis.gpus.table import AMBIGUOUS, GPUS, GpuSpec, MiB
from gpumem_kernel.render.text import shown

GiB = 1 << 30


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
_BY_NAME = {spec.name: spec for spec in GPUS}
_FAMILIES = {_normal(family): tuple(_BY_NAME[n] for n in choices) for family, choices in AMBIGUOUS.items()}
# what NVML appends to a name: form factor, board and memory ("A100-SXM4-80GB", "H100 80GB HBM3", "V100-FHHL-16GB")
_FORM_FACTOR = re.compile(r"(sxm\d?|pcie|\d+gb|hbm\de?|nvl|gpu|dgxs|fhhl)*")


def _size_agrees(spec: GpuSpec, size: Optional[int]) -> bool:
    """A size in the name ('80gb') names the card's marketing size: NVML's total is that, or a GiB below."""
    return size is None or round(spec.memory_bytes / GiB) in (size, size - 1)


def _nvml_match(key: str) -> Optional[GpuSpec]:
    """The one entry whose name (or family) is `key`'s prefix followed only by form-factor words and whose size,
    if the name says one, agrees; None when none or several do."""
    found = re.search(r"(\d+)gb", key)
    size = int(found.group(1)) if found else None
    candidates = [(k, (spec,)) for k, spec in _INDEX.items()] + list(_FAMILIES.items())
    hits = {
        spec
        for k, specs in candidates
        if len(k) >= 2 and key.startswith(k) and _FORM_FACTOR.fullmatch(key[len(k) :])
        for spec in specs
        if _size_agrees(spec, size)
    }
    return hits.pop() if len(hits) == 1 else None


def lookup(name: str) -> GpuSpec:
    """The table entry for a GPU name, alias or NVML name; ValueError (one line, with close names) otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("GPU name must be a non-empty string, e.g. 'RTX 4080 Super'")
    key = _normal(name)
    if key in _INDEX:
        return _INDEX[key]
    if key in _FAMILIES:
        choices = [spec.name for spec in _FAMILIES[key]]
        raise ValueError(f"ambiguous GPU {name.strip()!r}: say {' or '.join(repr(c) for c in choices)}")
    spec = _nvml_match(key)
    if spec is not None:
        return spec
    close = close_names(key)
    if close:
        raise ValueError(f"unknown GPU {shown(name)}; close names: {', '.join(close)}")
    raise ValueError(
        f"unknown GPU {shown(name)}: no close name in the table (gpumem_kernel.analysis.gpus.lookup.names() lists its "
        f"{len(GPUS)} GPUs); or plan by its memory alone, e.g. --memory 24GiB"
    )


CLOSE_CUTOFF = 0.7  # "rtx4080supr" is 0.96 from "rtx4080super"; "gtx9999" 0.43 from every xx90: no name at all
MAX_CLOSE = 5


def close_names(key: str) -> List[str]:
    """The table's names closest to a normalised name, closest first, at most MAX_CLOSE; none when nothing is
    genuinely close (then listing the whole table would only bury the answer)."""
    close = difflib.get_close_matches(key, list(_INDEX), n=3 * MAX_CLOSE, cutoff=CLOSE_CUTOFF)
    return list(dict.fromkeys(_INDEX[k].name for k in close))[:MAX_CLOSE]


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
        match = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot read memory size {shown(value)}; write e.g. '16GiB' or '24GB'")
        number, unit = float(match.group(1)), match.group(2).lower()
    result = int(number * _UNITS[unit])
    if result <= 0:
        raise ValueError(f"memory size must be positive, got {shown(value)}")
    return result


def context_estimate(compute_capability: Optional[str]) -> int:
    """The lazy-loading context by GPU generation alone; analysis/gpus/cuda_context.py models the whole stack."""
    from gpumem_kernel.analysis.gpus.cuda_context import generation_estimate

    return generation_estimate(compute_capability)


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
