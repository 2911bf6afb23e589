"""A Ctrl-C in the middle of an import leaves no half-imported package: the guard (analysis.allocator.import_guard)
either lets the import finish and then raises the interrupt, or mends what the unwound import left behind.

The packages imported here are written to a temporary folder: each stops half-way, after one submodule has
loaded, the way sympy stopped when a first analysis was interrupted.
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from gpumem_kernel.analysis.allocator.import_guard import (
    guarded_import,
    import_repair,
    interrupts_deferred,
    interrupts_held,
    pending_interrupt,
    repair,
)

# `from .done.leaf import` loads a submodule and binds a name, not the submodule: only the import system sets
# `done` on the package, when it loads it (sympy's `from .printing import ...`); then the package stops half-way
INTERRUPTED = """\
import os
from .done.leaf import VALUE
if os.environ.get("HALF_WAY_STOP"):
    raise KeyboardInterrupt
from . import rest
"""
SIGNALLED = """\
import signal
from .done.leaf import VALUE
signal.raise_signal(signal.SIGINT)  # Ctrl-C, delivered while the import is half done
from . import rest
"""


def _package(root: Path, name: str, init: str) -> None:
    folder = root / name
    (folder / "done").mkdir(parents=True)
    (folder / "__init__.py").write_text(init)
    (folder / "done" / "__init__.py").write_text("from . import leaf\n")
    (folder / "done" / "leaf.py").write_text("VALUE = 1\n")
    (folder / "rest.py").write_text("VALUE = 2\n")


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name, init in (("half_way", INTERRUPTED), ("signalled", SIGNALLED)):
        _package(tmp_path, name, init)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for name in [n for n in sys.modules if n.split(".")[0] in ("half_way", "signalled")]:
        del sys.modules[name]


def _import_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALF_WAY_STOP", "1")
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module("half_way")
    monkeypatch.delenv("HALF_WAY_STOP")


def test_without_the_guard_the_next_import_misses_the_submodule(packages, monkeypatch):
    """What the guard is for: Python keeps the finished submodule and drops its package."""
    _import_interrupted(monkeypatch)
    assert "half_way" not in sys.modules and "half_way.done" in sys.modules

    import half_way

    with pytest.raises(AttributeError, match="has no attribute 'done'"):
        half_way.done  # noqa: B018


def test_the_repair_lets_the_next_import_load_the_whole_package(packages, monkeypatch):
    monkeypatch.setenv("HALF_WAY_STOP", "1")
    with pytest.raises(KeyboardInterrupt):
        with import_repair():
            importlib.import_module("half_way")
    monkeypatch.delenv("HALF_WAY_STOP")

    assert not [name for name in sys.modules if name.startswith("half_way")]
    import half_way

    assert half_way.done.leaf.VALUE == 1 and half_way.rest.VALUE == 2


def test_the_repair_leaves_whole_imports_and_earlier_modules_alone(packages, monkeypatch):
    import half_way.done

    done = half_way.done
    with pytest.raises(ValueError):
        with import_repair():
            import json.tool  # noqa: F401  a whole import in the block

            raise ValueError("a failure that is no import's")
    assert sys.modules["half_way.done"] is done and "json.tool" in sys.modules


def test_a_loaded_module_its_package_never_got_is_attached():
    """A Ctrl-C between loading a submodule and setting it on its package: the module is put there."""
    import email

    before = frozenset(sys.modules) - {"email.base64mime"}
    module = importlib.import_module("email.base64mime")
    delattr(email, "base64mime")

    assert repair(before) == []
    assert email.base64mime is module


def test_ctrl_c_during_a_guarded_import_waits_for_its_end(packages):
    # Python's own handler, as in a kernel's cell: whatever SIGINT handler an earlier test in this process left
    # (the guard hands the held Ctrl-C to the handler it replaced, and an ignored one raises nothing)
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            guarded_import(lambda: importlib.import_module("signalled"))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)

    import signalled

    assert signalled.done.leaf.VALUE == 1 and signalled.rest.VALUE == 2  # imported whole, then interrupted


def test_a_held_interrupt_goes_to_the_handler_it_replaced():
    taken = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: taken.append(signum))
    try:
        with interrupts_held():
            signal.raise_signal(signal.SIGINT)
            assert taken == []
        assert taken == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_deferred_interrupt_is_raised_where_the_block_says():
    """A fake trace's tracker raises Ctrl-C at its next operator, never inside a device query."""
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred() as pending:
            assert pending_interrupt() is pending
            signal.raise_signal(signal.SIGINT)
            steps.append("went on")
            pending.raise_if_pending()
            steps.append("after the safe point")
    assert steps == ["went on"] and pending_interrupt() is None


def test_off_the_main_thread_the_block_runs_as_is():
    done = []

    def body() -> None:
        with interrupts_held():
            done.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert done == [signal.getsignal(signal.SIGINT)]


def test_the_tracer_imports_give_fake_tensor_mode():
    pytest.importorskip("torch")
    from gpumem_kernel.analysis.allocator.import_guard import tracer_imports

    mode = tracer_imports()
    assert mode.__name__ == "FakeTensorMode" and "torch._dynamo" in sys.modules and "sympy.printing" in sys.modules
