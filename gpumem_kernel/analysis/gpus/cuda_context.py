"""Everything a PyTorch process holds on the GPU outside the caching allocator: the CUDA context, the kernel
images loaded into it, and what the libraries load. Modelled from what determines it, each factor named:

  CUDA runtime   torch.version.cuda: lazy module loading exists from 11.7 and is CUDA's own default from 12.2;
  loading        CUDA_MODULE_LOADING as torch leaves it: torch >= 1.13 sets LAZY when unset (CUDAHooks::initCUDA,
                 maybe_set_cuda_module_loading, pytorch PR 85692/86509); EAGER loads every module up front;
  driver         lazy loading needs an R515+ driver (NVIDIA, CUDA Programming Guide, "Lazy Loading");
  architecture   the context and the kernels loaded grow with the GPU generation;
  torch build    under eager loading the whole libtorch_cuda image for the GPU is loaded: > 1 GiB for CUDA 11
                 wheels, about 0.4 GiB for CUDA 10 ones (CALIBRATION below);
  libraries      cuBLAS/cuBLASLt (every matmul), cuDNN (convolutions, RNNs, batch norm), NCCL (distributed).

Read in the user's kernel without creating a context (torch.version.cuda, os.environ, NVML); with --target the
plan is for the kernel's torch on the target GPU. CALIBRATION cites a source per point; see `check_points`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Mapping, Optional, Sequence, Tuple

MiB = 1 << 20

# With lazy loading, by GPU generation (compute capability major): the context plus the kernels a first step
# loads. In-house figures kept from gpus.context_estimate (no published source gives them per generation); the
# published lazy points below fall within LAZY_UNCERTAINTY of them (tests/analysis/test_context.py checks).
_LAZY_CORE_MIB = {5: 320, 6: 320, 7: 384, 8: 448, 9: 544, 10: 544, 12: 544}
_UNKNOWN_CORE_MIB = 512
LAZY_UNCERTAINTY = 160 * MiB


@dataclass(frozen=True)
class Point:
    """One published measurement of a process with only a context (a tiny tensor at most)."""

    url: str
    what: str  # how it was measured, in the source's words where possible
    gpu: Optional[str]
    cc: Optional[str]  # None: the source does not name the GPU
    driver: Optional[str]
    cuda: Optional[str]
    torch: Optional[str]
    loading: str  # lazy | eager
    mib: float  # context alone: the figure less what the allocator held (2 MiB block, 20 MiB segment)
    wheel: bool = True  # a released torch build (a development build's kernel image is not a wheel's)


CALIBRATION: Tuple[Point, ...] = (
    Point(
        "https://huggingface.co/docs/transformers/perf_train_gpu_one",
        "NVML used after torch.ones((1, 1)).to('cuda'): 1343 MiB, less a 2 MiB block",
        "Tesla V100-SXM2-16GB",
        "7.0",
        "460.91",
        "11.2",
        "1.x (CUDA 11.2 wheel)",
        "eager",
        1341,
    ),
    Point(
        "https://github.com/pytorch/pytorch/issues/55277",
        "nvidia-smi after torch.Tensor(1).cuda(): 1687 MB, less a 2 MiB block",
        "GeForce RTX 3090",
        "8.6",
        None,
        "11.1",
        "1.8.2+cu111",
        "eager",
        1685,
    ),
    Point(
        "https://github.com/pytorch/pytorch/issues/55277",
        "nvidia-smi after torch.Tensor(1).cuda(): 721 MB, less a 2 MiB block",
        "GeForce GTX 1080",
        "6.1",
        None,
        "10.1",
        "1.8.2+cu101",
        "eager",
        719,
    ),
    Point(
        "https://github.com/pytorch/pytorch/pull/85692",
        "total-free after randn(20,16,50,100).cuda() with CUDA_MODULE_LOADING=DEFAULT: 666,632,192 B, less 20 MiB",
        None,
        None,
        None,
        "11.7",
        "1.13 development build",
        "eager",
        615.75,
        wheel=False,
    ),
    Point(
        "https://github.com/pytorch/pytorch/pull/85692",
        "total-free after randn(20,16,50,100).cuda(), LAZY (the PR's default): 287,047,680 B, less 20 MiB",
        None,
        None,
        None,
        "11.7",
        "1.13 development build",
        "lazy",
        253.75,
        wheel=False,
    ),
    Point(
        "https://github.com/unslothai/unsloth-zoo/pull/1053",
        "nvidia-smi after torch.cuda.mem_get_info(0), nothing allocated: 426 MiB",
        "RTX 6000 Ada",
        "8.9",
        None,
        "13.0",
        "2.10.0+cu130",
        "lazy",
        426,
    ),
    Point(
        "https://github.com/pytorch/pytorch/issues/107667#issuecomment-1696115380",
        "ptrblck: 'the currently used ~300MB' (CUDA >= 11.7, lazy); '>1000MB' before 11.7",
        None,
        None,
        None,
        ">=11.7",
        "2.0",
        "lazy",
        300,
    ),
    Point(
        "https://github.com/pytorch/pytorch/issues/109888",
        "ptrblck: the context 'uses around 400MB if CUDA >= 11.7 is used and lazy module loading enabled'",
        None,
        None,
        None,
        ">=11.7",
        "2.0",
        "lazy",
        400,
    ),
)


@dataclass(frozen=True)
class ContextFactors:
    cuda_runtime: Optional[str]  # torch.version.cuda; None: a torch without CUDA, or not read
    torch_version: Optional[str]
    module_loading: Optional[str]  # CUDA_MODULE_LOADING as set before torch initialises CUDA; None: unset
    compute_capability: Optional[str]
    driver_version: Optional[str]  # NVML's; None: not readable (--target, no NVML)
    libraries: Tuple[str, ...] = ("cuBLAS", "cuBLASLt")
    planned: bool = False  # --target/--memory: planned for this kernel's torch on another GPU
    other_torch: bool = False  # planned for another torch than this kernel's (analyze's torch_version)


@dataclass(frozen=True)
class ContextPart:
    factor: str
    bytes: int
    note: str


@dataclass(frozen=True)
class ContextEstimate:
    bytes: int
    uncertainty_bytes: int
    basis: str
    lazy: bool
    parts: Tuple[ContextPart, ...]
    notes: Tuple[str, ...] = field(default=())


def _version(text: Optional[str]) -> Optional[Tuple[int, int]]:
    match = re.match(r"\s*(\d+)(?:\.(\d+))?", text or "")
    return (int(match.group(1)), int(match.group(2) or 0)) if match else None


def _major(cc: Optional[str]) -> Optional[int]:
    version = _version(cc)
    return version[0] if version else None


def lazy_core(cc: Optional[str]) -> int:
    major = _major(cc)
    if major is None:
        return _UNKNOWN_CORE_MIB * MiB
    return _LAZY_CORE_MIB.get(major, 320 if major < 5 else 544) * MiB


def lazy_loading(f: ContextFactors) -> Tuple[bool, str]:
    """Whether modules load lazily, and why (the order is CUDA's: a forced EAGER or an old stack wins)."""
    mode = (f.module_loading or "").strip().upper()
    runtime, driver = _version(f.cuda_runtime), _version(f.driver_version)
    if mode == "EAGER":
        return False, "CUDA_MODULE_LOADING=EAGER"
    if runtime is not None and runtime < (11, 7):
        return False, f"CUDA {f.cuda_runtime} < 11.7 has no lazy loading"
    if driver is not None and driver[0] < 515:
        return False, f"driver {f.driver_version} < 515 cannot load lazily"
    if mode == "LAZY":
        return True, "CUDA_MODULE_LOADING=LAZY"
    torch = _version(f.torch_version)
    if torch is None or torch >= (1, 13):
        return True, "torch sets CUDA_MODULE_LOADING=LAZY"
    if runtime is not None and runtime >= (12, 2):
        return True, "CUDA >= 12.2 loads lazily by default"
    return False, f"torch {f.torch_version} leaves CUDA_MODULE_LOADING unset (eager)"


def _eager_extras(points: Sequence[Point], cuda_major: int) -> Tuple[float, ...]:
    """The eager torch image per released build: each point's context less the lazy core of its GPU."""
    return tuple(
        p.mib - lazy_core(p.cc) / MiB
        for p in points
        if p.loading == "eager" and p.wheel and p.cc and (_version(p.cuda) or (0, 0))[0] == cuda_major
    )


def eager_torch_image(cuda_runtime: Optional[str], points: Sequence[Point] = CALIBRATION) -> Tuple[int, int]:
    """(bytes, uncertainty) of the kernels eager loading adds: the mean over the released builds of that CUDA
    major (CUDA 12+ builds eager-loaded by request are taken as CUDA 11's), uncertainty their spread."""
    runtime = _version(cuda_runtime)
    major = min(11, max(10, runtime[0] if runtime else 11))
    extras = _eager_extras(points, major) or _eager_extras(points, 11)
    if not extras:
        return 0, LAZY_UNCERTAINTY
    centre = mean(extras)
    spread = max(abs(e - centre) for e in extras)
    return int(centre * MiB), max(LAZY_UNCERTAINTY, int(spread * MiB) + LAZY_UNCERTAINTY // 2)


def libraries_for(model: Any = None, distributed: bool = False) -> Tuple[str, ...]:
    """cuBLAS and cuBLASLt for every training step (matmuls, addmm with a bias); cuDNN when the model has
    convolutions, RNNs or batch norm; NCCL when the step is distributed."""
    libs = ["cuBLAS", "cuBLASLt"]
    if model is not None and _uses_cudnn(model):
        libs.append("cuDNN")
    if distributed:
        libs.append("NCCL")
    return tuple(libs)


def _uses_cudnn(model: Any) -> bool:
    try:
        from torch import nn

        kinds = (nn.modules.conv._ConvNd, nn.RNNBase, nn.modules.batchnorm._BatchNorm)
        return any(isinstance(m, kinds) for m in model.modules())
    except Exception:  # not a torch module: nothing to tell
        return False


def estimate(f: ContextFactors, points: Sequence[Point] = CALIBRATION) -> ContextEstimate:
    lazy, why = lazy_loading(f)
    core = lazy_core(f.compute_capability)
    parts = [ContextPart("architecture", core, f"context + first-step kernels, {_sm(f.compute_capability)}")]
    uncertainty = LAZY_UNCERTAINTY
    notes = []
    if not lazy:
        image, uncertainty = eager_torch_image(f.cuda_runtime, points)
        parts.append(ContextPart("torch build (eager)", image, f"every libtorch_cuda kernel loaded: {why}"))
    if _major(f.compute_capability) is None:
        notes.append("compute capability unknown: the generation figure is a guess")
    # No published figure isolates the libraries' modules on the device (they are missing from the estimate):
    # named, not counted, and said so.
    parts += [
        ContextPart(lib, 0, "modules loaded at first use: no published figure, not counted") for lib in f.libraries
    ]
    if "NCCL" in f.libraries:
        notes.append("NCCL's communicator buffers are not counted")
    total = sum(p.bytes for p in parts)
    return ContextEstimate(total, uncertainty, basis(f, lazy), lazy, tuple(parts), tuple(notes))


def _sm(cc: Optional[str]) -> str:
    return f"sm_{cc.replace('.', '')}" if cc else "GPU unknown"


def basis(f: ContextFactors, lazy: bool) -> str:
    """'estimate: CUDA 12.4, lazy loading, sm_90, driver 550.54, cuBLAS + cuBLASLt + cuDNN (planned for ...)'."""
    items = [
        f"CUDA {f.cuda_runtime}" if f.cuda_runtime else "CUDA of this torch unknown",
        "lazy loading" if lazy else "eager loading",
        _sm(f.compute_capability),
    ]
    if f.driver_version:
        items.append(f"driver {f.driver_version}")
    if f.libraries:
        items.append(" + ".join(f.libraries))
    text = "estimate: " + ", ".join(items)
    if f.planned:
        whose = "torch" if f.other_torch else "this kernel's torch"
        text += f" (planned for {whose} {f.torch_version or 'unknown'})"
    return text


def read_factors(
    compute_capability: Optional[str],
    *,
    planned: bool,
    model: Any = None,
    distributed: bool = False,
    environ: Optional[Mapping[str, str]] = None,
    stack: Optional[Tuple[str, Optional[str]]] = None,
) -> ContextFactors:
    """What the user's kernel can tell without a CUDA context: torch's build, the environment, NVML's driver.
    `stack`: (torch, CUDA runtime) planned for instead of this kernel's build (analyze's torch_version)."""
    import torch  # importing torch creates no context; torch.version.cuda is a build constant

    env = os.environ if environ is None else environ
    runtime, version = getattr(torch.version, "cuda", None), str(torch.__version__).split("+")[0]
    if stack is not None:
        version, runtime = stack
    return ContextFactors(
        cuda_runtime=runtime,
        torch_version=version,
        module_loading=env.get("CUDA_MODULE_LOADING"),
        compute_capability=compute_capability,
        driver_version=None if planned else nvml_driver_version(),
        libraries=libraries_for(model, distributed),
        planned=planned,
        other_torch=stack is not None,
    )


def nvml_driver_version() -> Optional[str]:
    """NVML's driver version (nvmlSystemGetDriverVersion needs no CUDA context), or None. From the shared
    Prober's cache: a whole sample (processes, host, workers) would be taken only to read it."""
    try:
        from gpumem_kernel.probe.prober import default_prober

        return default_prober().driver_version()
    except Exception:  # no NVML, no GPU: the driver factor stays unknown
        return None


def generation_estimate(compute_capability: Optional[str]) -> int:
    """The lazy-loading figure by generation alone (gpus.context_estimate without the modules)."""
    return lazy_core(compute_capability)
