"""Will it fit: the measured and traced memory estimators, the storage tracker (also the simulated device of
autobatch and the benchmark), the workbench real training steps run on, the allocator model, the GPU table, and
the analysis output.

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
    "CachingAllocatorModel": ("allocator", "CachingAllocatorModel"),
    "analyze": ("analyze", "analyze"),
    "trace_step": ("analyze", "trace_step"),
    "OPTIMIZERS": ("arguments", "OPTIMIZERS"),
    "OPTIMIZER_ALIASES": ("arguments", "OPTIMIZER_ALIASES"),
    "amp_mode_of": ("arguments", "amp_mode_of"),
    "check_model": ("arguments", "check_model"),
    "optimizer_kind": ("arguments", "optimizer_kind"),
    "parse_shape": ("arguments", "parse_shape"),
    "positive_int": ("arguments", "positive_int"),
    "Point": ("engines", "Point"),
    "BlasWorkspaces": ("gpus", "BlasWorkspaces"),
    "blas_workspaces": ("gpus", "blas_workspaces"),
    "context_estimate": ("gpus", "context_estimate"),
    "gpu_lookup": ("gpus", "lookup"),
    "parse_memory": ("gpus", "parse_memory"),
    "import_repair": ("import_guard", "import_repair"),
    "interrupts_held": ("import_guard", "interrupts_held"),
    "batch_maker": ("inputs", "batch_maker"),
    "LORA_HELP": ("lora", "LORA_HELP"),
    "clear_cublas_workspaces": ("measure", "clear_cublas_workspaces"),
    "measure_step_peaks": ("measure", "measure_step_peaks"),
    "run_real_steps": ("measure", "run_real_steps"),
    "analyze_named": ("model_source", "analyze_named"),
    "build_named_model": ("model_source", "build"),
    "default_input": ("model_source", "default_input"),
    "is_model_source": ("model_source", "is_model_source"),
    "MemoryMonitor": ("monitor", "MemoryMonitor"),
    "MonitorResult": ("monitor", "MonitorResult"),
    "BnbSettings": ("optimizers", "BnbSettings"),
    "planned_bitsandbytes": ("optimizers", "planned_bitsandbytes"),
    "MAX_ROUNDING_MULTIPLE": ("picks", "MAX_MULTIPLE"),
    "below_caption": ("picks", "below_caption"),
    "parse_rounding": ("picks", "parse_rounding"),
    "resolve_rounding": ("picks", "resolve"),
    "rounding_from_options": ("picks", "from_options"),
    "rounding_text": ("picks", "rounding_text"),
    "QUANTIZE_HELP": ("quantize", "QUANTIZE_HELP"),
    "BANNER": ("render", "BANNER"),
    "analysis_bundle": ("render", "analysis_bundle"),
    "esc": ("render", "esc"),
    "html_table": ("render", "html_table"),
    "pick_rows": ("render", "pick_rows"),
    "recommendation_block": ("render", "recommendation_block"),
    "title_of": ("render", "title_of"),
    "AnalysisReport": ("report", "AnalysisReport"),
    "AnalysisRequest": ("request", "AnalysisRequest"),
    "search_maximum": ("search", "search_maximum"),
    "MAX_SEQ_MULTIPLE": ("seq_search", "MAX_MULTIPLE"),
    "parse_multiple": ("seq_search", "parse_multiple"),
    "StepError": ("step_error", "StepError"),
    "NullTracker": ("storage", "NullTracker"),
    "SimulatedOOM": ("storage", "SimulatedOOM"),
    "interrupts_at_operators": ("storage", "interrupts_at_operators"),
    "make_tracker": ("storage", "make_tracker"),
    "register_states": ("storage", "register_states"),
    "run_trace": ("trace", "run_trace"),
    "TraceError": ("trace_plan", "TraceError"),
    "TraceEvents": ("trace_plan", "TraceEvents"),
    "TracePlan": ("trace_plan", "TracePlan"),
    "TraceResult": ("trace_plan", "TraceResult"),
    "autocast_factory": ("training_loop", "autocast_factory"),
    "default_loss": ("training_loop", "default_loss"),
    "feed": ("training_loop", "feed"),
    "train_steps": ("training_loop", "train_steps"),
    "RngSnapshot": ("workbench", "RngSnapshot"),
    "Workbench": ("workbench", "Workbench"),
    "clean_allocator": ("workbench", "clean_allocator"),
    "first_line": ("workbench", "first_line"),
    "grad_scaler": ("workbench", "grad_scaler"),
    "optimizer_step": ("workbench", "optimizer_step"),
    "parse_cap": ("workbench", "parse_cap"),
    "resolve_device": ("workbench", "resolve_device"),
    "to_device": ("workbench", "to_device"),
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
