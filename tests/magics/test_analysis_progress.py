"""`%gpumem analyze`'s progress line: one output updated in place with the phase, the traces done and the seconds,
turned into the report when done; Ctrl-C ends the cell with one line, and the next analysis runs."""

from __future__ import annotations

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME  # noqa: E402
from gpumem_kernel.magics import progress as progress_module  # noqa: E402

SETUP = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
"""
LINE = "%gpumem analyze model --batch 16 --memory 64MiB"


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ip():
    with gpumem_shell() as shell:
        run(shell, SETUP)
        yield shell


def run(ip, code: str):
    with capture_output() as captured:
        ip.run_cell(code)
    return captured


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_a_long_analysis_shows_one_line_updated_in_place_then_the_report(ip, monkeypatch):
    monkeypatch.setenv("GPUMEM_PROGRESS_AFTER", "0")  # every analysis counts as long here
    captured = run(ip, LINE)

    assert captured.stderr == ""
    assert [o.update for o in captured.outputs] == [False] + [True] * (len(captured.outputs) - 1)
    lines = [o.data["text/plain"] for o in captured.outputs[:-1]]
    assert lines[0].startswith("gpumem analyze model: analysing batch 16 · 0 traces done · ")  # before any trace
    assert lines[1].startswith("gpumem analyze model: analysing batch 16: tracing batch 16 · 0 traces done · ")
    assert any(line.startswith("gpumem analyze model: searching the largest batch: tracing batch") for line in lines)
    done = [int(line.split(" · ")[1].split()[0]) for line in lines if " · " in line]
    assert done == sorted(done) and done[-1] > 2
    assert all("\n" not in line for line in lines)  # one line
    assert ANALYSIS_MIME in captured.outputs[-1].data  # the line became the report


def test_a_quick_analysis_shows_only_its_report(ip, monkeypatch):
    monkeypatch.setenv("GPUMEM_PROGRESS_AFTER", "3600")
    captured = run(ip, LINE)

    assert len(captured.outputs) == 1 and not captured.outputs[0].update
    assert ANALYSIS_MIME in captured.outputs[0].data


def test_ctrl_c_at_a_trace_ends_the_cell_with_one_line_and_the_next_analysis_runs(ip, monkeypatch):
    monkeypatch.setenv("GPUMEM_PROGRESS_AFTER", "0")
    drawn = progress_module.ProgressLine.update

    def interrupted_at_trace_3(self, progress):  # the search's second trace, two traces done
        drawn(self, progress)
        if ": tracing batch " in progress.doing and progress.traces == 2:
            raise KeyboardInterrupt

    model = ip.user_ns["model"]
    before = state(model)
    monkeypatch.setattr(progress_module.ProgressLine, "update", interrupted_at_trace_3)
    captured = run(ip, LINE)

    shown = (captured.stdout + captured.stderr).strip()
    assert shown.startswith("KeyboardInterrupt: gpumem analyze model stopped while searching the largest batch: ")
    assert "(2 traces done) after " in shown and shown.endswith(" s; your model and optimizer are as they were")
    assert "\n" not in shown and "Traceback" not in shown
    assert captured.outputs[-1].update and captured.outputs[-1].data == {"text/plain": ""}  # the line is gone
    assert all(torch.equal(v, before[k]) for k, v in state(model).items())

    monkeypatch.setattr(progress_module.ProgressLine, "update", drawn)
    again = run(ip, LINE)
    assert again.stderr == "" and ANALYSIS_MIME in again.outputs[-1].data
