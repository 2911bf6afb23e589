"""The IPython exception handler: it keeps IPython's normal traceback and adds the OOM checklist as an inline
MIME bundle below it, for every out-of-memory error. Nothing here imports torch or initialises CUDA.

A shell's handler (OomHandler: its settings and the last checklist) is owned by the loaded extension's Kernel
(`install` hands it back, extension.py keeps it), or, installed without the extension (`install_oom_handler`), kept
for that shell by gpumem_kernel.current, weakly; `handler_of(shell)` finds it either way."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from gpumem_kernel import current
from gpumem_kernel.oom.analyzed import AnalyzedModel
from gpumem_kernel.oom.bundle import OOM_MIME, checklist_bundle
from gpumem_kernel.oom.classify import is_oom
from gpumem_kernel.oom.figures import Advise
from gpumem_kernel.oom.rerun import failing_cell
from gpumem_kernel.probe.snapshot import take_sample
from gpumem_kernel.probe.torchstats import loaded_torch


@dataclass
class OomHandler:
    """One shell's OOM handler: what it chains to, how it probes, and the last checklist it showed."""

    previous_exceptions: Tuple[type, ...]
    previous_handler: Any  # the shell's CustomTB before ours (a bound method), or None
    installed_handler: Any = None
    probe: Optional[Callable[[], Optional[Mapping[str, Any]]]] = None
    analyzed: Optional[Callable[[], Optional[AnalyzedModel]]] = None  # what the last analysis was for
    capture: Optional[Callable[..., Optional[Dict[str, Any]]]] = None  # the OOM capture's alive_at_oom
    advise: Optional[Advise] = None  # computes the fit advice of a small failed model (oom.figures)
    last: Optional[Dict[str, Any]] = None  # the last OOM payload, for the panel
    last_bundle: Optional[Dict[str, Any]] = None  # the whole bundle, for `%gpumem oom`


def handler_of(shell: Any) -> Optional[OomHandler]:
    """The OOM handler `shell` installed (the loaded Kernel's, or one installed without the extension), or None."""
    found = current.oom_handler(shell)
    return found if isinstance(found, OomHandler) else None


@contextlib.contextmanager
def _worker_deaths_told() -> Iterator[None]:
    """While an error is shown and its checklist built, a DataLoader worker's death does not raise again.

    PyTorch's SIGCHLD handler raises "DataLoader worker (pid N) is killed by signal" wherever the main thread is,
    for as long as the failed iterator lives, and the error's traceback keeps it alive: the second worker's death
    raised inside the traceback's formatting or the checklist, and the user saw neither. The error on screen tells
    of the deaths already; any other handler still hears the signal."""
    sigchld = getattr(signal, "SIGCHLD", None)
    previous = signal.getsignal(sigchld) if sigchld is not None else None
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        yield
        return

    def told(signum: int, frame: Any) -> None:
        with contextlib.suppress(RuntimeError):
            previous(signum, frame)

    signal.signal(sigchld, told)
    try:
        yield
    finally:
        signal.signal(sigchld, previous)


def _handle(shell: Any, state: OomHandler, etype: type, value: BaseException, tb: Any, tb_offset: Optional[int]) -> Any:
    with _worker_deaths_told():
        return _shown(shell, state, etype, value, tb, tb_offset)


def _shown(shell: Any, state: OomHandler, etype: type, value: BaseException, tb: Any, tb_offset: Optional[int]) -> Any:
    stb = None
    if state.previous_exceptions and issubclass(etype, state.previous_exceptions):
        stb = state.previous_handler(etype, value, tb, tb_offset=tb_offset)  # the user's handler runs as before
    else:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)  # IPython's normal traceback
    if not is_oom(value):
        return stb
    try:
        sample = state.probe() if state.probe else None
        analyzed = state.analyzed() if state.analyzed else None
        bundle = checklist_bundle(
            value,
            shell,
            sample=sample,
            tb=tb,
            analyzed=analyzed,
            capture=state.capture,
            cell=failing_cell(shell),
            advise=state.advise,
        )
        if bundle is not None:
            state.last, state.last_bundle = bundle[OOM_MIME], bundle
            shell.display_pub.publish(data=bundle, metadata={})
    except Exception as exc:  # never let IPython unregister the handler (it does when a handler raises)
        print(
            f"gpumem: could not build the OOM checklist: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr
        )
    return stb


def install_oom_handler(
    shell: Any,
    *,
    probe: Optional[Callable[[], Optional[Mapping[str, Any]]]] = None,
    analyzed: Optional[Callable[[], Optional[AnalyzedModel]]] = None,
    capture: Optional[Callable[..., Optional[Dict[str, Any]]]] = None,
    advise: Optional[Advise] = None,
) -> str:
    """Show the OOM checklist under the traceback of every out-of-memory error (any family). Returns one line
    saying what was done. A custom handler the user already set keeps running first for its exceptions.
    `analyzed()`: what the last `%gpumem analyze` was for (its batch is offered for that model only).
    `capture(tried, device, title)`: what was alive at the error (the OOM capture), or None.
    `advise(model, **request_fields)`: the fit advice, computed for a small model that failed (oom.figures).
    Without the extension: the handler is kept for `shell` (gpumem_kernel.current) until uninstalled."""
    line, handler = install(shell, probe=probe, analyzed=analyzed, capture=capture, advise=advise)
    if handler is not None:
        current.keep_oom_handler(shell, handler)
    return line


def install(
    shell: Any,
    *,
    probe: Optional[Callable[[], Optional[Mapping[str, Any]]]] = None,
    analyzed: Optional[Callable[[], Optional[AnalyzedModel]]] = None,
    capture: Optional[Callable[..., Optional[Dict[str, Any]]]] = None,
    advise: Optional[Advise] = None,
) -> Tuple[str, Optional[OomHandler]]:
    """install_oom_handler's work, the handler handed to its owner (the loaded Kernel) rather than kept: (the
    line, the new handler or None when `shell` already has one). `advise(model, **request_fields)`: the fit
    advice (analysis.advise), computed for a small failed model so its steps show each lever's figures."""
    if handler_of(shell) is not None:
        return "the OOM checklist is already installed", None
    previous = tuple(getattr(shell, "custom_exceptions", ()) or ())
    state = OomHandler(
        previous,
        shell.CustomTB if previous else None,
        probe=probe or take_sample,
        analyzed=analyzed,
        capture=capture,
        advise=advise,
    )

    def handler(self: Any, etype: type, value: BaseException, tb: Any, tb_offset: Optional[int] = None) -> Any:
        return _handle(self, state, etype, value, tb, tb_offset)

    torch = loaded_torch()
    # torch.OutOfMemoryError subclasses RuntimeError; RuntimeError also catches it when torch is imported later
    # and catches the older RuntimeError("CUDA out of memory…"), XLA's, NCCL's and accelerate's. MemoryError is
    # the host's (numpy's too), ValueError vLLM's KV-cache errors. Other exceptions get the normal traceback.
    # TensorFlow's ResourceExhaustedError is neither: its class counts when TensorFlow is already imported.
    tf_errors = sys.modules.get("tensorflow.python.framework.errors_impl")
    candidates = (
        getattr(torch, "OutOfMemoryError", None),
        RuntimeError,
        MemoryError,
        ValueError,
        getattr(tf_errors, "ResourceExhaustedError", None),
    )
    ours = tuple(c for c in candidates if isinstance(c, type))
    shell.set_custom_exc(previous + tuple(c for c in ours if c not in previous), handler)
    state.installed_handler = shell.CustomTB
    if previous:
        names = ", ".join(c.__name__ for c in previous)
        return f"OOM checklist installed; your exception handler for {names} still runs first", state
    return "OOM checklist installed", state


def uninstall_oom_handler(shell: Any, handler: Optional[OomHandler] = None) -> str:
    """Remove the OOM handler (`handler`: the one its owner kept; default: the one `shell` installed) and put
    back the handler that was there before. Returns one line."""
    state = handler or handler_of(shell)
    if state is None:
        return "the OOM checklist is not installed"
    if current.oom_handler(shell) is state:
        current.keep_oom_handler(shell, None)
    if shell.CustomTB != state.installed_handler:
        return "the OOM checklist was replaced by another exception handler since; left that one in place"
    if state.previous_exceptions:
        shell.custom_exceptions, shell.CustomTB = state.previous_exceptions, state.previous_handler
    else:
        shell.set_custom_exc((), None)
    return "OOM checklist removed"


def last_oom(shell: Any) -> Optional[Dict[str, Any]]:
    """The payload of the last OOM the handler saw (for the panel's checklist), or None."""
    state = handler_of(shell)
    return state.last if state is not None else None


def last_oom_bundle(shell: Any) -> Optional[Dict[str, Any]]:
    """The checklist bundle of the last OOM: the one the handler showed, else one built now from
    `sys.last_value` when that is an OOM the handler did not see (the extension was loaded after it)."""
    state = handler_of(shell)
    if state is not None and state.last_bundle is not None:
        return state.last_bundle
    value = getattr(sys, "last_value", None)
    if not isinstance(value, BaseException) or not is_oom(value):
        return None
    probe = state.probe if state is not None and state.probe is not None else take_sample
    analyzed = state.analyzed() if state is not None and state.analyzed is not None else None
    advise = state.advise if state is not None else None
    tb = getattr(sys, "last_traceback", None)
    bundle = checklist_bundle(value, shell, sample=probe(), tb=tb, analyzed=analyzed, advise=advise)
    if bundle is not None and state is not None:
        state.last, state.last_bundle = bundle[OOM_MIME], bundle
    return bundle
