"""Lazy, failure-tolerant access to NVML (the NVIDIA driver's management library).

NVML reads device-wide figures and per-process usage without creating a CUDA context, which is why the
sampler uses it rather than torch. Nothing here runs at import time: the driver is touched on first use.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

# NVML return codes we explain to users (values from nvml.h; identical in every pynvml release).
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

_INIT_REASONS = {
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVIDIA driver library (libnvidia-ml.so.1) not found",
    NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA driver not loaded",
    NVML_ERROR_NO_PERMISSION: "no permission to use the NVIDIA driver (NVML: Insufficient Permissions)",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "NVIDIA driver and libnvidia-ml.so versions differ (reboot or reload the driver)"
    ),
}


def _import_pynvml() -> Any:
    import pynvml  # nvidia-ml-py

    return pynvml


def error_code(exc: BaseException) -> Optional[int]:
    """The NVML return code carried by a pynvml NVMLError (None for any other exception)."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def describe_error(exc: BaseException) -> str:
    """One line for an exception raised by an NVML call."""
    text = str(exc).strip()
    return text or type(exc).__name__


def init_failure_reason(exc: BaseException) -> str:
    """Why NVML could not start, in words a user can act on."""
    code = error_code(exc)
    if code in _INIT_REASONS:
        return _INIT_REASONS[code]
    return f"NVML could not start: {describe_error(exc)}"


class Nvml:
    """One NVML session for the kernel: initialised once on first use, then shared by every probe.

    `module` is a pynvml-like module; tests pass a fake with the same function names.
    """

    def __init__(self, module: Any = None, loader: Callable[[], Any] = _import_pynvml) -> None:
        self._module = module
        self._loader = loader
        self._lock = threading.Lock()
        self._started = False
        self._reason: Optional[str] = None

    def start(self) -> Optional[str]:
        """Initialise NVML if not done yet; return None when usable, else the reason it is not.

        A failure is remembered for the kernel's lifetime: retrying every second would only repeat
        the same dlopen() search; a driver installed later needs a kernel restart anyway.
        """
        with self._lock:
            if not self._started:
                self._started = True
                self._reason = self._init()
            return self._reason

    def _init(self) -> Optional[str]:
        if self._module is None:
            try:
                self._module = self._loader()
            except ImportError:
                return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        try:
            self._module.nvmlInit()
        except Exception as exc:  # pynvml raises NVMLError subclasses; a broken binding may raise others
            return init_failure_reason(exc)
        return None

    @property
    def module(self) -> Any:
        """The pynvml module; only valid after start() returned None."""
        return self._module

    def call(self, function: str, *args: Any) -> Any:
        """Call an NVML function by name (lets tests' fakes and missing old functions fail the same way)."""
        return getattr(self._module, function)(*args)

    def shutdown(self) -> None:
        with self._lock:
            if self._started and self._reason is None and self._module is not None:
                try:
                    self._module.nvmlShutdown()
                except Exception:
                    pass  # shutting down at exit: nothing useful to report
            self._started = False
            self._reason = None
