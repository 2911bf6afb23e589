"""Will it fit: the measured and traced memory estimators, the storage tracker (also the simulated device of
autobatch and the benchmark), the workbench real training steps run on, the allocator model, the GPU table, and
the analysis output.

Inside, one folder per stage, bottom first (scripts/check_imports.py holds each to import only the ones below
it): request/ (the options and batches), gpus/ (the GPUs planned for), allocator/ (the caching-allocator model and
the storage tracker), fake/ (where a fake CPU trace differs from CUDA, and its answers), trace/ (the traced engine),
report/ (the report's data, picks and rendering), model/ (model states, LoRA and quantised copies), measure/ (real
steps on the GPU), search/ (the batch and sequence searches), pipeline/ (analyze(), from request to report).

The entry point: code outside this folder (the magics, the terminal, autobatch, the benchmark, the timeline and
benchmarks/) imports from `gpumem_kernel.analysis` only the names in `__all__`, never one of its
modules (scripts/check_imports.py holds it to that), so the estimator's inside can change without its users
changing. Each name loads its module on first use: importing the package stays cheap (the magics' option table
reads a few constants of it when the extension loads).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Dict, Tuple

# name -> (module in this folder, its attribute)
_EXPORTS: Dict[str, Tuple[str, str]] = {
    "CachingAllocatorModel": ("allocator.caching_allocator", "CachingAllocatorModel"),
    "analyze": ("pipeline.analyze", "analyze"),
    "advise": ("pipeline.advice", "advise"),
    "advice_runs": ("pipeline.advice", "advice_runs"),
    "analyzed_with_advice": ("pipeline.advice", "analyzed_with_advice"),
    "ADVICE_SECONDS": ("pipeline.advice", "ADVICE_SECONDS"),
    "trace_step": ("pipeline.analyze", "trace_step"),
    "OPTIMIZERS": ("request.arguments", "OPTIMIZERS"),
    "OPTIMIZER_ALIASES": ("request.arguments", "OPTIMIZER_ALIASES"),
    "amp_mode_of": ("request.arguments", "amp_mode_of"),
    "check_model": ("request.arguments", "check_model"),
    "optimizer_kind": ("request.arguments", "optimizer_kind"),
    "parse_shape": ("request.arguments", "parse_shape"),
    "positive_int": ("request.arguments", "positive_int"),
    "Point": ("search.engines", "Point"),
    "cuda_kernels": ("fake.cuda_kernels", "cuda_kernels"),
    "BlasWorkspaces": ("gpus.lookup", "BlasWorkspaces"),
    "blas_workspaces": ("gpus.lookup", "blas_workspaces"),
    "context_estimate": ("gpus.lookup", "context_estimate"),
    "gpu_lookup": ("gpus.lookup", "lookup"),
    "parse_memory": ("gpus.lookup", "parse_memory"),
    "import_repair": ("allocator.import_guard", "import_repair"),
    "interrupts_held": ("allocator.import_guard", "interrupts_held"),
    "batch_maker": ("request.inputs", "batch_maker"),
    "LORA_HELP": ("model.lora", "LORA_HELP"),
    "PEFT_HELP": ("model.peft_config", "PEFT_HELP"),
    "clear_cublas_workspaces": ("measure.real_steps", "clear_cublas_workspaces"),
    "measure_step_peaks": ("measure.real_steps", "measure_step_peaks"),
    "run_real_steps": ("measure.real_steps", "run_real_steps"),
    "RandomBatch": ("measure.gloo_ranks", "RandomBatch"),
    "RanksFailed": ("measure.gloo_ranks", "RanksFailed"),
    "measure_ranks": ("measure.gloo_ranks", "measure_ranks"),
    "RankSetup": ("trace.ranks", "RankSetup"),
    "Sharding": ("model.model_states", "Sharding"),
    "RankTraceError": ("trace.ranks", "RankTraceError"),
    "trace_rank": ("trace.ranks", "trace_rank"),
    "analyze_named": ("pipeline.model_source", "analyze_named"),
    "build_named_model": ("pipeline.model_source", "build"),
    "default_input": ("pipeline.model_source", "default_input"),
    "is_model_source": ("pipeline.model_source", "is_model_source"),
    "BnbSettings": ("trace.modelled_optimizers", "BnbSettings"),
    "planned_bitsandbytes": ("trace.modelled_optimizers", "planned_bitsandbytes"),
    "MAX_ROUNDING_MULTIPLE": ("report.picks", "MAX_MULTIPLE"),
    "below_caption": ("report.picks", "below_caption"),
    "parse_rounding": ("report.picks", "parse_rounding"),
    "resolve_rounding": ("report.picks", "resolve"),
    "rounding_from_options": ("report.picks", "from_options"),
    "rounding_text": ("report.picks", "rounding_text"),
    "QUANTIZE_HELP": ("model.quantize", "QUANTIZE_HELP"),
    "BNB_HELP": ("model.bnb_rules", "BNB_HELP"),
    "bnb_rules_for": ("model.bnb_rules", "rules_for"),
    "parse_quantize": ("model.quantize", "parse_quantize"),
    "with_bnb_version": ("model.quantize", "with_bnb_version"),
    "BANNER": ("report.render", "BANNER"),
    "analysis_bundle": ("report.render", "analysis_bundle"),
    "esc": ("report.render", "esc"),
    "html_table": ("report.render", "html_table"),
    "pick_rows": ("report.render", "pick_rows"),
    "recommendation_block": ("report.render", "recommendation_block"),
    "title_of": ("report.render", "title_of"),
    "AnalysisReport": ("report.report", "AnalysisReport"),
    "AnalysisRequest": ("request.request", "AnalysisRequest"),
    "search_maximum": ("search.max_batch", "search_maximum"),
    "GenerationPlan": ("search.generation_plan", "GenerationPlan"),
    "generation_bundle": ("report.generation_render", "generation_bundle"),
    "plan_generation": ("search.generation_plan", "plan_generation"),
    "MAX_SEQ_MULTIPLE": ("search.max_sequence", "MAX_MULTIPLE"),
    "parse_multiple": ("search.max_sequence", "parse_multiple"),
    "StepError": ("request.step_error", "StepError"),
    "NullTracker": ("allocator.storage", "NullTracker"),
    "SimulatedOOM": ("allocator.storage", "SimulatedOOM"),
    "interrupts_at_operators": ("allocator.storage", "interrupts_at_operators"),
    "make_tracker": ("allocator.storage", "make_tracker"),
    "register_states": ("allocator.storage", "register_states"),
    "run_trace": ("trace.run", "run_trace"),
    "TraceError": ("trace.plan", "TraceError"),
    "TraceEvents": ("trace.plan", "TraceEvents"),
    "TracePlan": ("trace.plan", "TracePlan"),
    "TraceResult": ("trace.plan", "TraceResult"),
    "autocast_factory": ("trace.training_loop", "autocast_factory"),
    "default_loss": ("trace.training_loop", "default_loss"),
    "feed": ("trace.training_loop", "feed"),
    "train_steps": ("trace.training_loop", "train_steps"),
    "RngSnapshot": ("measure.workbench", "RngSnapshot"),
    "Workbench": ("measure.workbench", "Workbench"),
    "clean_allocator": ("measure.workbench", "clean_allocator"),
    "first_line": ("measure.workbench", "first_line"),
    "grad_scaler": ("measure.workbench", "grad_scaler"),
    "optimizer_step": ("measure.workbench", "optimizer_step"),
    "parse_cap": ("measure.workbench", "parse_cap"),
    "resolve_device": ("measure.workbench", "resolve_device"),
    "to_device": ("measure.workbench", "to_device"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    place = _EXPORTS.get(name)
    if place is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # read from its module at each use, not kept here: a test's monkeypatch of the module is what callers get
    return getattr(importlib.import_module(f"{__name__}.{place[0]}"), place[1])


class _Entry(types.ModuleType):
    """The package, whose exported `analyze` (the function) a first import of its module `analysis.analyze` would
    otherwise replace with that module: importing a submodule sets the package's attribute of the same name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Entry
