"""Ctrl-C where it breaks nothing: imports it cannot leave half done, and traces it cannot abort.

The first fake trace of a kernel imports torch._dynamo (FakeTensorMode's constructor asks for its config), and
with it sympy, mpmath, numpy.random, torch._inductor...: some 800 modules, a second or more. A KeyboardInterrupt
in the middle unwinds every import in progress, and Python removes those modules from sys.modules but keeps the
submodules that had finished: `sympy.printing` stays while `sympy` goes. The next `import sympy` makes a new
package that never gets its `printing` attribute (Python attaches a submodule to its package only when it loads
it), so that import and every analysis after it fail with "module 'sympy' has no attribute 'printing'".
Removing every module the import added is no cure: torch registers operator namespaces (TORCH_LIBRARY) once
per process, and running those modules again raises.

Two guards, then:

- `interrupts_held()`: SIGINT waits until the block ends (the tracer's heavy imports, `tracer_imports`), then
  is raised, so those imports finish whole; on the main thread only, where Python delivers signals.
- `import_repair()`: an exception that leaves the block (any thread, any import) mends what a half-done import
  left: modules added in the block whose package is gone are removed, so that the next import loads them again
  with their package; a module that loaded but whose package never got its attribute gets it. Modules that
  finished with their package stay as they are. The fallback where SIGINT cannot be held (another thread,
  another exception): a torch module that runs twice may still refuse (a registry that takes a name once).

A fake trace needs more: a FakeTensor's `device` is answered by Python code that C++ calls where an exception
cannot pass (a KeyboardInterrupt there aborts the process: "terminate called after throwing an instance of
'python_error'", the kernel dies). `interrupts_deferred()` notes SIGINT during the trace, and the tracker raises it
at its next operator (`PendingInterrupt.raise_if_pending`), where an exception travels back to the caller as the
simulated OOM does; one still pending when the block ends is raised then.

torch is imported inside functions only: the kernel shim must load without it.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from types import FrameType, ModuleType
from typing import AbstractSet, Any, Callable, Iterator, List, Optional

Handler = Any  # what signal.signal returns: a callable, SIG_DFL, SIG_IGN or None


def _ancestors(name: str) -> Iterator[str]:
    parts = name.split(".")
    for end in range(1, len(parts)):
        yield ".".join(parts[:end])


def _orphaned(name: str) -> bool:
    """A module whose package (or one above it) is no longer imported: its import was unwound."""
    return any(package not in sys.modules for package in _ancestors(name))


def _attach(name: str, module: ModuleType) -> None:
    """Set the submodule on its package, as the import would have done after loading it. Its __dict__, not
    hasattr: a lazy package's __getattr__ would import. sys.modules may hold objects that take no attribute."""
    package_name, _, child = name.rpartition(".")
    namespace = getattr(sys.modules.get(package_name), "__dict__", None) if package_name else None
    if namespace is not None and child not in namespace:
        with contextlib.suppress(AttributeError, TypeError):
            setattr(sys.modules[package_name], child, module)


def repair(before: AbstractSet[str]) -> List[str]:
    """Mend the imports begun since `before` (the names in sys.modules then) that an exception unwound: the
    names removed (imported afresh next time)."""
    added = [name for name in list(sys.modules) if name not in before]
    removed = [name for name in added if _orphaned(name)]
    for name in removed:
        sys.modules.pop(name, None)
    for name in added:
        module = sys.modules.get(name)
        if module is not None:
            _attach(name, module)
    return removed


@contextlib.contextmanager
def import_repair() -> Iterator[None]:
    """Whatever leaves this block by an exception (Ctrl-C above all) leaves no half-imported module behind."""
    before = frozenset(sys.modules)
    try:
        yield
    except BaseException:
        repair(before)
        raise


def _deliver(previous: Handler) -> None:
    """The held SIGINT, as the handler the block replaced would have taken it."""
    if callable(previous):
        previous(signal.SIGINT, None)
    elif previous != signal.SIG_IGN:
        raise KeyboardInterrupt


class PendingInterrupt:
    """The SIGINT handler of a deferring block: notes the signal, for the block to raise where it is safe."""

    def __init__(self) -> None:
        self.signals: List[int] = []

    def note(self, signum: int, frame: Optional[FrameType]) -> None:
        self.signals.append(signum)

    def raise_if_pending(self) -> None:
        if self.signals:
            self.signals.clear()
            raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[Optional[PendingInterrupt]]:
    """SIGINT during the block is noted: raised by `raise_if_pending()` or, still pending when the block ends, by
    the handler the block replaced. None off the main thread, where signals never arrive."""
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    pending = PendingInterrupt()
    previous = signal.signal(signal.SIGINT, pending.note)
    try:
        yield pending
    finally:
        signal.signal(signal.SIGINT, previous)
        if pending.signals:
            _deliver(previous)


def pending_interrupt() -> Optional[PendingInterrupt]:
    """The innermost deferring block's, if one is running on this thread (its handler is SIGINT's)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = getattr(signal.getsignal(signal.SIGINT), "__self__", None)
    return handler if isinstance(handler, PendingInterrupt) else None


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """SIGINT during the block is held, and raised (by the handler it replaced) once the block is done."""
    with interrupts_deferred():
        yield


def guarded_import(load: Callable[[], Any]) -> Any:
    """`load()` (imports) finished whole despite Ctrl-C, then the interrupt raised; a failure mended."""
    with import_repair(), interrupts_held():
        return load()


def _tracer_modules() -> Any:
    import torch._dynamo.config  # noqa: F401  FakeTensorMode's constructor imports it: torch._dynamo, sympy...
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode


def tracer_imports() -> Any:
    """FakeTensorMode, with what its first use imports (torch._dynamo, sympy) loaded whole."""
    return guarded_import(_tracer_modules)
