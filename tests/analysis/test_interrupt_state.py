"""Ctrl-C at any moment of an analysis, an autobatch search or a benchmark leaves nothing behind: torch's functions,
dispatch modes, autocast and grad mode, the garbage collector, the RNGs, the user's model, loader worker processes
and threads are as they were, no module is half-imported, and the next call gives the same answer.

The moments are the k-th Python function call of a run, spread over all of it (the imports, the traces, the trials,
the restores after them): there a real SIGINT is sent to this process, which Python delivers as Ctrl-C would.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, Callable, Dict, List, Optional

import pytest

torch = pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

from user_state import assert_same, state_of  # noqa: E402
from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.autobatch.search import auto_select_batch_size  # noqa: E402
from gpumem_kernel.benchmark.sweep import run_benchmark  # noqa: E402

# per run: the first call, then evenly over the rest (GPUMEM_INTERRUPT_MOMENTS=30 for a closer look)
MOMENTS = int(os.environ.get("GPUMEM_INTERRUPT_MOMENTS", "5"))
OWNERS = ("torch", "torch.nn.functional", "torch.Tensor", "torch.autograd", "torch.cuda", "torch.amp")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def model() -> "torch.nn.Module":
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 4))


def _owner(name: str) -> Any:
    return torch.Tensor if name == "torch.Tensor" else sys.modules[name]


def _half_imported() -> List[str]:
    return sorted(
        name
        for name in list(sys.modules)
        if any(".".join(name.split(".")[:i]) not in sys.modules for i in range(1, name.count(".") + 1))
    )


def _attributes() -> Dict[str, Dict[str, int]]:
    return {name: {k: id(v) for k, v in vars(_owner(name)).items()} for name in OWNERS}


def _global_state() -> Dict[str, Any]:
    """What a run may change while it runs and must put back."""
    fake = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    return {
        "dispatch modes": torch._C._len_torch_dispatch_stack(),
        "function modes": torch._C._len_torch_function_stack(),
        "fake mode": fake is not None,
        "grad": torch.is_grad_enabled(),
        "inference": torch.is_inference_mode_enabled(),
        "autocast": torch.is_autocast_enabled("cpu"),
        "autocast cache": torch.is_autocast_cache_enabled(),
        "mkldnn": torch.backends.mkldnn.enabled,
        "default dtype": torch.get_default_dtype(),
        "gc frozen": gc.get_freeze_count(),
        "fake tensor log": logging.getLogger("torch._subclasses.fake_tensor").disabled,
        "threads": sorted(t.name for t in threading.enumerate()),
        "child processes": sorted(p.pid for p in psutil.Process().children(recursive=True)),
        "sigint": signal.getsignal(signal.SIGINT),
        "half-imported": _half_imported(),
    }


def _changed_attributes(before: Dict[str, Dict[str, int]]) -> List[str]:
    """Functions swapped and not put back, or added (a swap over an inherited one) and not taken away."""
    after = _attributes()
    changed = []
    for owner, names in before.items():
        now = after[owner]
        changed += [f"{owner}.{n}" for n, ident in names.items() if now.get(n) != ident]
        added = [n for n in now.keys() - names.keys() if not isinstance(getattr(_owner(owner), n), type(sys))]
        changed += [f"{owner}.{n} (added)" for n in added]
    return changed


def _calls(run: Callable[[], Any]) -> int:
    """How many Python function calls a run makes."""
    count = [0]

    def tracer(frame: FrameType, event: str, arg: Any) -> None:
        count[0] += 1

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    return count[0]


def _interrupted_at(run: Callable[[], Any], call: int) -> Optional[Any]:
    """The run with SIGINT sent at its `call`-th Python function call: its result, or None if it raised
    KeyboardInterrupt."""
    count, pid = [0], os.getpid()

    def tracer(frame: FrameType, event: str, arg: Any) -> None:
        if os.getpid() != pid:  # a forked DataLoader worker inherits the tracer: the interrupt is this process's
            sys.settrace(None)
            return
        count[0] += 1
        if count[0] == call:
            sys.settrace(None)
            signal.raise_signal(signal.SIGINT)

    sys.settrace(tracer)
    try:
        return run()
    except KeyboardInterrupt:
        return None
    finally:
        sys.settrace(None)


def _let_closing_threads_end(names: List[str], seconds: float = 10.0) -> None:
    """Wait (up to `seconds`) for the threads the run started to end: a closed multiprocessing queue's feeder
    thread (a DataLoader's index queue after its workers shut down) flushes and exits on its own a moment after
    close(). One still running after that was left behind, and the state check names it."""
    deadline = time.monotonic() + seconds
    for thread in threading.enumerate():
        if thread.name not in names and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def _check_every_moment(run: Callable[[], Any], answer: Callable[[Any], Any], user: Any) -> None:
    baseline = answer(run())
    total = _calls(run)
    before, attributes, user_state = _global_state(), _attributes(), state_of(user, None)
    left: List[str] = []
    stopped = 0
    for call in sorted({1} | {max(1, total * i // MOMENTS) for i in range(1, MOMENTS)}):
        result = _interrupted_at(run, call)
        stopped += result is None or getattr(result, "interrupted", False)
        _let_closing_threads_end(before["threads"])
        state = _global_state()
        changed = [f"{k}: {before[k]!r} -> {state[k]!r}" for k in before if state[k] != before[k]]
        changed += _changed_attributes(attributes)
        if changed:
            left.append(f"call {call} of {total}: {changed}")
        assert_same(user_state, state_of(user, None))
        assert answer(run()) == baseline  # the next call works, with the same answer
    assert not left, left
    assert stopped >= MOMENTS - 2  # the interrupts did stop runs (one in a restore, or in a loop's last step, may not)


def test_an_interrupted_analysis_leaves_nothing_behind():
    user = model()
    _check_every_moment(
        lambda: analyze(user, batch_size=4, input=(16,), amp="bf16"),
        lambda report: (report.recommendations.maximum, report.peak_bytes),
        user,
    )


def test_an_interrupted_autobatch_leaves_nothing_behind():
    user = model()
    _check_every_moment(
        lambda: auto_select_batch_size(user, input=(16,), simulate=120_000),
        lambda result: result.maximum if not result.interrupted else "interrupted",
        user,
    )


def test_an_interrupted_benchmark_leaves_nothing_behind():
    user = model()
    options = dict(synthetic_shape="16", num_classes=4, batch_sizes=[4, 8], num_workers=[0, 1], steps=2)
    _check_every_moment(
        lambda: run_benchmark(user, simulate="1GiB", warmup_steps=1, **options),
        lambda result: [(r.batch_size, r.num_workers, r.status) for r in result.rows] if not result.interrupted else 0,
        user,
    )
