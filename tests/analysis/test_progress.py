"""An analysis tells its on_progress what it does (the phases in the order they run, each trace begun and done), and
a callback that raises (Ctrl-C while it draws) stops it between traces with nothing of the user's changed and nothing
of the tracer's left switched on: the next analysis gives the same answer."""

from __future__ import annotations

import signal
from typing import Any, List

import pytest

torch = pytest.importorskip("torch")

from user_state import assert_same, state_of  # noqa: E402
from gpumem_kernel.analysis import analyze  # noqa: E402
from gpumem_kernel.analysis.request.progress import PHASES, Progress  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mlp() -> "torch.nn.Module":
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


OPTIONS = dict(batch_size=8, input=(32,), memory="64MiB", amp="bf16", eval_batch=4)


def _phases(seen: List[Progress]) -> List[str]:
    order: List[str] = []
    for update in seen:
        if not order or order[-1] != update.phase:
            order.append(update.phase)
    return order


def test_the_callback_hears_the_phases_in_order_and_every_trace():
    seen: List[Progress] = []
    report = analyze(mlp(), on_progress=seen.append, **OPTIONS)

    assert _phases(seen) == ["batch", "maximum", "amp", "evaluation", "done"]
    assert [p for p in _phases(seen)] == [p for p in PHASES if p in _phases(seen)]  # the documented order
    assert seen[0].doing == "analysing batch 8" and seen[1].doing == "analysing batch 8: tracing batch 8"
    begun = [u for u in seen if ": tracing batch " in u.doing]
    counts = [u.traces for u in seen]
    assert counts == sorted(counts) and seen[-1].traces == len(begun) > 3  # each trace begun is counted once done
    assert all(b.traces == i for i, b in enumerate(begun))  # a trace begins only once the one before is done
    assert [u.elapsed for u in seen] == sorted(u.elapsed for u in seen)
    searched = {int(u.doing.rsplit(" ", 1)[1]) for u in begun if u.phase == "maximum"}
    assert {report.recommendations.maximum, report.recommendations.maximum + 1} & searched
    assert "tracing batch 8 · 0 traces done" in seen[1].line()


def test_without_a_callback_the_report_is_the_same():
    heard = analyze(mlp(), on_progress=lambda update: None, **OPTIONS).to_payload()
    silent = analyze(mlp(), **OPTIONS).to_payload()
    for payload in (heard, silent):
        payload.pop("elapsed_seconds", None)
    assert heard == silent


def _tracer_state() -> Any:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return (
        signal.getsignal(signal.SIGINT),
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
        _get_current_dispatch_mode(),
    )


@pytest.mark.parametrize("stop_at", [0, 2, 5])
def test_an_interrupt_from_the_callback_at_trace_k_stops_between_traces_and_leaves_nothing(stop_at):
    model = mlp()
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 32)).pow(2).mean().backward()
    optimizer.step()  # state of the user's own: kept byte for byte
    before, tracer = state_of(model, optimizer), _tracer_state()
    seen: List[Progress] = []

    def interrupting(update: Progress) -> None:
        seen.append(update)
        if ": tracing batch " in update.doing and update.traces == stop_at:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        analyze(model, optimizer=optimizer, on_progress=interrupting, **OPTIONS)

    assert seen[-1].traces == stop_at and seen[-1].phase != "done"
    assert_same(before, state_of(model, optimizer))
    assert _tracer_state() == tracer
    again = analyze(model, optimizer=optimizer, **OPTIONS).to_payload()
    fresh = analyze(model, optimizer=optimizer, **OPTIONS).to_payload()
    for payload in (again, fresh):
        payload.pop("elapsed_seconds", None)
    assert again == fresh


def test_a_model_by_name_with_the_sequence_search_hears_the_build_and_each_length():
    from pathlib import Path

    from gpumem_kernel.analysis import analyze_named

    config = Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "llama"
    seen: List[Progress] = []
    report = analyze_named(
        str(config), batch_size=1, memory="2GiB", search="seq", seq_batches="1", on_progress=seen.append
    )

    assert _phases(seen) == ["building", "batch", "maximum", "sequence", "done"]
    assert seen[0].doing == f"building {config}" and seen[0].traces == 0
    lengths = {u.doing.split("(")[1].split(" tokens")[0] for u in seen if u.phase == "sequence"}
    assert {str(p.seq) for p in report.sequence_search.results[0].curve} <= lengths  # each length traced was told
