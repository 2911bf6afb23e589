"""What makes it fit (analysis.advise): each lever's row is the analysis run with that lever set, to the byte; the
micro-batch lever keeps the samples per optimizer step; a lever already set has no row; the user's model and
optimizer stay as they were; the levers' progress comes as one phase, "trying levers k of n"."""

from __future__ import annotations

from dataclasses import replace
from typing import List

import pytest

torch = pytest.importorskip("torch")

from user_state import assert_same, state_of  # noqa: E402
from gpumem_kernel.analysis import AnalysisRequest, advise, analyze  # noqa: E402
from gpumem_kernel.analysis.request.progress import Progress  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def mlp() -> "torch.nn.Module":
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))


def test_each_row_is_the_analysis_with_that_lever_to_the_byte():
    model = mlp()
    request = AnalysisRequest(batch_size=64, input=(256,), target="T4")
    before = state_of(model, None)
    analysed = analyze(model, request)
    advice = advise(model, request, analysed)

    assert [r.lever for r in advice.rows] == [
        "8-bit optimizer",
        "AMP bf16",
        "smaller micro-batch",
        "gradient checkpointing",
    ]
    for row in advice.rows:
        alone = analyze(model, replace(request, **row.changes))
        assert (row.peak_bytes, row.peak_allocated_bytes, row.maximum) == (
            alone.peak_bytes,
            alone.peak_allocated_bytes,
            alone.recommendations.maximum,
        ), row.lever
    micro = next(r for r in advice.rows if r.lever == "smaller micro-batch")
    assert micro.changes == {"batch_size": 32, "grad_accum": 2} and micro.flags == "-b 32 --accum 2"
    assert advice.peak_bytes == analysed.peak_bytes
    assert_same(before, state_of(model, None))
    assert "--optimizer adamw8bit" in advice.text() and "AMP bf16" in advice.bundle()["text/html"]


def test_a_lever_already_set_has_no_row_and_progress_comes_as_the_levers_phase():
    model = mlp()
    seen: List[Progress] = []
    request = AnalysisRequest(batch_size=1, input=(256,), target="T4", amp="bf16", on_progress=seen.append)
    advice = advise(model, request, analyze(model, replace(request, on_progress=None)))

    assert [r.lever for r in advice.rows] == ["8-bit optimizer", "gradient checkpointing"]  # batch 1: no micro-batch
    assert {u.phase for u in seen} == {"levers"}
    order = [u.doing.split(":")[0] for u in seen]
    assert (
        order[0] == "trying levers 1 of 2 (8-bit optimizer)"
        and order[-1] == "trying levers 2 of 2 (gradient checkpointing)"
    )
    assert [u.traces for u in seen] == sorted(u.traces for u in seen)  # counted on across the levers


def test_the_magic_shows_the_table_after_the_report_and_refuses_it_with_a_timeline():
    from IPython.utils.capture import capture_output

    from conftest import gpumem_shell
    from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME

    with gpumem_shell({"model": mlp()}) as ip:
        with capture_output() as captured:
            ip.run_cell("%gpumem analyze model --batch 64 --input 256 --target T4 --advise")
        with capture_output() as refused:
            ip.run_cell("%gpumem analyze model --batch 64 --input 256 --advise --timeline")

    assert captured.stderr == "" and len(captured.outputs) == 2
    assert ANALYSIS_MIME in captured.outputs[0].data
    table = captured.outputs[1].data["text/plain"].splitlines()
    assert table[0].startswith("What makes it fit") and len(table) == 1 + 4
    assert "-b 32 --accum 2" in table[3] and "--checkpointing" in table[4]
    assert refused.stderr.strip() == "UsageError: gpumem analyze: --advise and --timeline: one at a time"
