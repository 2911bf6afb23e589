"""jupyterlab-gpumem, kernel side: live GPU memory of this kernel for JupyterLab, and `%gpumem` magics.

`%load_ext gpumem_kernel` (or the browser's bootstrap) starts a sampler thread and the `gpumem` comm
target. Importing this package is cheap and touches neither NVML nor CUDA.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

# The browser calls `__import__('gpumem_kernel').frontend.<action>()`: the submodule must be an attribute
# after a plain import. It imports nothing heavy until called.
from gpumem_kernel.channel import frontend


def _read_version() -> str:
    try:
        from gpumem_kernel._version import __version__ as version  # written by the wheel build

        return str(version)
    except ImportError:
        pass
    try:
        from importlib.metadata import version as dist_version

        return dist_version("jupyterlab-gpumem")
    except Exception:  # not installed (running from a source checkout)
        return "0.0.0"


__version__ = _read_version()


def _jupyter_labextension_paths() -> List[Dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyterlab-gpumem"}]


def load_ipython_extension(ip: Any) -> None:
    from gpumem_kernel import extension

    extension.load(ip, __version__)


def unload_ipython_extension(ip: Any) -> None:
    from gpumem_kernel import extension

    extension.unload(ip)


def _bootstrap() -> str:
    """Called by the browser through a silent execute's user_expressions: load the extension if needed.

    Returns JSON `{"version": ..., "protocol": 1}` so the browser can check compatibility before opening
    the comm.
    """
    from IPython import get_ipython

    from gpumem_kernel import extension
    from gpumem_kernel.wire.protocol import PROTOCOL_VERSION

    ip = get_ipython()
    if ip is not None and extension.current() is None:
        ip.extension_manager.load_extension("gpumem_kernel")
        if extension.current() is None:  # the manager thought it loaded (e.g. after a manual unload)
            load_ipython_extension(ip)
    return json.dumps({"version": __version__, "protocol": PROTOCOL_VERSION})


def get_status() -> Dict[str, Any]:
    """GPU and host memory now, as the wire format's `sample` object."""
    from gpumem_kernel.magics.status import get_status as _get_status

    return _get_status()


def print_status() -> None:
    """Print GPU and host memory now, in the console layout."""
    from gpumem_kernel.magics.status import print_status as _print_status

    _print_status()


# The Python API for scripts, imported on first use (PEP 562): `import gpumem_kernel` stays cheap. Each name is
# a plain function or class of the module it maps to.
_LAZY = {
    "analyze": "analysis.pipeline.analyze",
    "trace_step": "analysis.pipeline.analyze",
    "analyze_named": "analysis.pipeline.model_source",
    "get_gpu_info": "probe.gpu_info",
    "print_gpu_info": "probe.gpu_info",
    "print_memory_analysis": "analysis.pipeline.analyze",
    "recommend_batch_size": "analysis.pipeline.analyze",
    "monitor_gpu_memory": "probe.monitor",
    "MemoryMonitor": "probe.monitor",
    "auto_select_batch_size": "autobatch.search",
    "run_benchmark": "benchmark.sweep",
    "load_config": "benchmark.config",
    "clear_gpu_memory": "clear.reclaim",
    "record_timeline": "timeline.recorded",
    "predict_timeline": "timeline.predicted",
    "log_gpu_memory": "log.csvlog",
    "MemoryLog": "log.csvlog",
    "holders": "heldby.collect",
    "watch": "watchwidget",
}


def __getattr__(name: str) -> Any:
    import importlib

    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpumem_kernel' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "__version__",
    "frontend",
    "get_status",
    "print_status",
    "load_ipython_extension",
    "unload_ipython_extension",
    *_LAZY,
]
