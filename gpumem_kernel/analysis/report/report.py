"""The analysis report: AnalysisReport and the dataclasses of its parts, and its JSON payload
(`application/vnd.gpumem.analysis.v1+json`, schemas/analysis.schema.json)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from gpumem_kernel.analysis.trace.llm_facts import LlmFacts
from gpumem_kernel.analysis.request.sequence import SequenceSearch


@dataclass
class Figure:
    """One labelled number of the report: which engine produced it, and how to read it."""

    name: str
    bytes: Optional[int]
    engine: str  # read | traced | measured | modelled | estimate | nvml | source
    note: str = ""


@dataclass
class CurvePoint:
    batch_size: int
    peak_bytes: int  # device footprint: reserved + a CUDA context not yet created (per rank)
    peak_allocated_bytes: int
    peak_reserved_bytes: Optional[int]
    engine: str


@dataclass
class Fit:
    intercept_bytes: float
    slope_bytes_per_sample: float
    max_relative_residual: Optional[float]
    points: int


@dataclass
class DeviceInfo:
    name: Optional[str]
    source: str  # nvml | target | memory | none
    total_bytes: Optional[int]
    free_bytes: Optional[int]
    reclaimable_bytes: int  # this process's memory the training would reuse (the model already there, cache)
    reserve_bytes: Optional[int]
    limit_bytes: Optional[int]  # what a training step may use: free + reclaimable - reserve
    compute_capability: Optional[str]
    bf16: Optional[bool]
    context_bytes: int
    context_source: str  # estimate (added to the footprint) | nvml (measured, already in use) | in use | none
    context_basis: str = ""  # what the context figure rests on: "estimate: CUDA 12.4, lazy loading, sm_90, …"

    @property
    def context_to_add(self) -> int:
        """A context that does not exist yet will take memory; one in use is already outside `free`."""
        return self.context_bytes if self.context_source == "estimate" else 0


@dataclass
class Current:
    batch_size: int
    peak_bytes: int
    status: str  # fits | tight | will-not-fit | unknown
    fraction_of_limit: Optional[float]


@dataclass
class Accumulation:
    """Accumulation steps per pick to reach the target effective batch (given, or the current one)."""

    target_effective_batch: int
    explicit_target: bool  # given by the caller: picks above it are capped to it
    maximum: Optional[int]
    recommended: Optional[int]
    safe: Optional[int]


@dataclass
class LrScaling:
    from_effective_batch: int
    to_effective_batch: Optional[int]
    linear: Optional[float]
    sqrt: Optional[float]
    hint: str


@dataclass
class Recommendations:
    maximum: Optional[int]
    recommended: Optional[int]
    safe: Optional[int]
    rounding: str
    extrapolated: bool
    note: str
    current: Current
    accumulation: Accumulation
    lr: LrScaling


@dataclass
class Distributed:
    world_size: int
    strategy: str
    parameters_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    extra_bytes: int
    extra_note: str
    activations_bytes: int
    peak_bytes: int
    note: str
    # "traced": rank 0's step traced under the strategy's wrappers, its figures at its peak; "formula": the
    # single-process trace's states divided by the strategy's shares
    engine: str = "formula"


@dataclass
class Evaluation:
    """The evaluation step at `batch` (model.eval(), torch.no_grad(): forward only, no gradients, no optimizer
    step), traced and replayed through the same allocator model, and the largest evaluation batch that fits
    (the same search as the training maximum)."""

    batch: int
    training_batch: int
    peak_live_bytes: int  # tensor level, as the CPU sees them
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    peak_bytes: int  # reserved + CUDA context, as the training step's peak_bytes
    activations_bytes: int
    input_bytes: int
    max_batch: Optional[int]  # None without a device limit
    rule_of_thumb_batch: int  # the guides': at most 1.3 x the training batch unless measured
    engine: str  # always traced
    note: str


@dataclass
class ErrorBound:
    relative: float
    absolute_bytes: int
    statement: str


@dataclass
class AnalysisReport:
    engine: str  # traced | measured
    model_name: str
    parameter_count: int
    trainable_parameter_count: int
    parameters_by_dtype: Dict[str, int]
    buffers_by_dtype: Dict[str, int]
    largest_layer: Dict[str, Any]
    settings: Dict[str, Any]
    parameters_bytes: int
    buffers_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    optimizer_host_bytes: int
    optimizer_transient_bytes: int
    activations_bytes: int
    input_bytes: int
    autocast_cache_bytes: int
    temporary_bytes: int
    peak_live_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: Optional[int]
    context_bytes: int
    workspace_bytes: int
    peak_bytes: int
    figures: List[Figure]
    breakdown_at_peak: Optional[Dict[str, int]]
    phase_peaks: Optional[Dict[str, int]]
    peak_phase: Optional[str]
    amp_saved_bytes: Optional[int]
    allocator: Optional[Dict[str, Any]]
    device: DeviceInfo
    curve: List[CurvePoint]
    fit: Optional[Fit]
    recommendations: Recommendations
    distributed: Optional[Distributed]
    error_bound: ErrorBound
    notes: List[str] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    version: int = 1
    # written from the rest once the analysis is complete (assemble.with_snippets): what "Copy as YAML" copies and
    # "Insert code" inserts
    config_yaml: str = ""
    accumulation_code: Optional[str] = None
    evaluation: Optional[Evaluation] = None  # only with eval_batch=
    llm: Optional[LlmFacts] = None  # logits and loss, attention, checkpointed blocks (analysis.trace.llm_facts)
    sequence_search: Optional[SequenceSearch] = None  # only with search="seq" (analysis.search.max_sequence)
    # what makes it fit (analysis.pipeline.advice), its payload as the front end that ran the advice set it; empty:
    # not advised (the payload then has no "advice")
    advice: Dict[str, Any] = field(default_factory=dict)

    def to_payload(self) -> Dict[str, Any]:
        """The JSON of `application/vnd.gpumem.analysis.v1+json` (schemas/analysis.schema.json): the fields as they
        are, the report unchanged."""
        data = asdict(self)
        model = {
            "name": data.pop("model_name"),
            "parameter_count": data.pop("parameter_count"),
            "trainable_parameter_count": data.pop("trainable_parameter_count"),
            "parameters_by_dtype": data.pop("parameters_by_dtype"),
            "buffers_by_dtype": data.pop("buffers_by_dtype"),
            "largest_layer": data.pop("largest_layer"),
        }
        if not data["advice"]:  # the key is optional in the schema: only an advised analysis has it
            del data["advice"]
        return {"version": data.pop("version"), "model": model, **data}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> Dict[str, Any]:
        from gpumem_kernel.analysis.report.render import analysis_bundle

        return analysis_bundle(self)

    def _mime_(self) -> Tuple[str, str]:
        """What marimo shows of a cell ending with the report: the static HTML alone, its cells spaced. Given the
        bundle, marimo would offer each of its types side by side, our JSON among them as an unsupported one."""
        from gpumem_kernel.analysis.report.render import CELL_SPACING, render_html

        return "text/html", CELL_SPACING + render_html(self.to_payload())

    def __str__(self) -> str:
        from gpumem_kernel.analysis.report.render import render_text

        return render_text(self.to_payload())
