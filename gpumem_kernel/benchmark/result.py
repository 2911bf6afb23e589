"""What the benchmark returns: one row per configuration, the picks, and the result that renders itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional

from gpumem_kernel.benchmark.report import benchmark_bundle, pick_yaml, recommended_yaml, render_text


@dataclass
class BenchmarkRow:
    batch_size: int
    num_workers: int
    amp: bool
    pin_memory: bool
    status: str  # ok | oom | swapping-suspected
    io_ms: Optional[float] = None  # blocked on next(loader_iter), host clock
    h2d_ms: Optional[float] = None
    forward_ms: Optional[float] = None  # forward + loss
    backward_ms: Optional[float] = None
    optimizer_ms: Optional[float] = None  # step (+ scaler) + zero_grad
    total_ms: Optional[float] = None  # the whole step, wall clock
    samples_per_s: Optional[float] = None
    gpu_util: Optional[float] = None  # NVML mean during the measured steps; None without a GPU
    peak_bytes: Optional[int] = None  # the figure the picks use: CUDA reserved peak, or tracked tensor bytes
    peak_allocated_bytes: Optional[int] = None
    peak_reserved_bytes: Optional[int] = None
    device_used_bytes: Optional[int] = None  # NVML, whole device, max during the steps
    efficiency: Optional[float] = None  # samples/s per GiB of peak_bytes
    energy_per_sample_j: Optional[float] = None  # NVML, the whole GPU over the measured steps; None without one
    mean_power_w: Optional[float] = None
    loader_restarts: int = 0
    seconds: float = 0.0
    error: Optional[str] = None


@dataclass
class Pick:
    kind: str  # highest_throughput | best_efficiency | recommended | most_energy_efficient
    row: int  # index into rows
    batch_size: int
    num_workers: int
    amp: bool
    pin_memory: bool
    samples_per_s: float
    peak_bytes: Optional[int]
    efficiency: Optional[float]
    gpu_util: Optional[float]
    note: str = ""
    energy_per_sample_j: Optional[float] = None


@dataclass
class BenchmarkResult:
    engine: str  # cuda | cpu | simulated
    device: Dict[str, Any]  # type, index, name, total_bytes
    limit_bytes: Optional[int]  # what memory_target applies to: the device's memory or the simulated cap
    memory_target: float
    memory_source: str
    amp_dtype: str  # float16 (CUDA, GradScaler) | bfloat16 (CPU autocast)
    config: Dict[str, Any]
    model: Dict[str, Any]
    optimizer: str
    data: str
    rows: List[BenchmarkRow]
    picks: Dict[str, Optional[Pick]]
    diagnostics: List[str]
    notes: List[str]
    interrupted: bool
    seconds: float
    workers: Dict[str, List[int]]  # leftover (found alive after shutdown) and terminated PIDs
    version: int = 1
    # written from the rest by to_payload: the recommended pick as "Copy as YAML" copies it; None without one
    config_yaml: Optional[str] = None

    def to_payload(self) -> Dict[str, Any]:
        """The JSON of `application/vnd.gpumem.benchmark.v1+json` (schemas/benchmark.schema.json)."""
        payload = asdict(self)
        self.config_yaml = payload["config_yaml"] = pick_yaml(payload, "recommended")
        return payload

    def to_yaml(self, pick: str = "recommended") -> str:
        """The picked configuration in the training-config shape (data.*, training.*); a comment alone when
        there is no such pick."""
        return recommended_yaml(self.to_payload(), pick)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Dict[str, Any]:
        return benchmark_bundle(self)

    def __str__(self) -> str:
        return render_text(self.to_payload())
