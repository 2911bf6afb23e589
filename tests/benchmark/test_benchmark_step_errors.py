"""A training step that raises (the user's forward, loss or data) is no bad option: the benchmark says which
exception the step raised, as analyze does, and the user's traceback stays behind it."""

from __future__ import annotations

import re
import traceback

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")
psutil = pytest.importorskip("psutil")

from conftest import gpumem_shell  # noqa: E402
from user_state import assert_same, state_of  # noqa: E402
from gpumem_kernel.analysis.request.step_error import StepError  # noqa: E402
from gpumem_kernel.benchmark.sweep import run_benchmark  # noqa: E402

SETUP = """\
import torch

class Refusing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 2)

    def forward(self, x):
        raise ValueError("user forward says no")

refusing = Refusing()
"""
LINE = "%gpumem benchmark refusing --synthetic 8 --classes 2 --batch-sizes 2 --num-workers 0 --simulate 1GiB"
SMALL = dict(synthetic_shape="8", num_classes=2, batch_sizes=[2, 4], num_workers=[0], steps=2, warmup_steps=1)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ip():
    with gpumem_shell() as shell:
        shell.run_cell(SETUP)
        yield shell


def run(ip, line: str):
    with capture_output() as captured:
        ip.run_cell(line)
    return re.sub(r"\x1b\[[0-9;]*m", "", captured.stdout + captured.stderr)  # IPython colours tracebacks


def test_the_step_error_names_the_users_exception_and_keeps_it():
    model = torch.nn.Linear(8, 2)
    before = state_of(model, None)

    def refusing_loss(output, batch):
        raise ValueError("user loss says no")

    with pytest.raises(StepError) as caught:
        run_benchmark(model, simulate="1GiB", loss=refusing_loss, **SMALL)

    assert str(caught.value) == "a training step failed: ValueError: user loss says no"
    assert isinstance(caught.value.__cause__, ValueError)
    assert traceback.extract_tb(caught.value.__cause__.__traceback__)[-1].name == "refusing_loss"
    assert_same(before, state_of(model, None))


def test_a_failing_step_leaves_no_loader_worker():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(StepError, match="ValueError: user forward says no"):
        run_benchmark(torch.nn.Linear(8, 2), simulate="1GiB", forward=_refusing, **{**SMALL, "num_workers": [1]})
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def _refusing(model, batch):
    raise ValueError("user forward says no")


def test_the_magic_says_the_type_as_analyze_does(ip, monkeypatch):
    monkeypatch.delenv("GPUMEM_DEBUG", raising=False)
    shown = run(
        ip, "%gpumem benchmark refusing --synthetic 8 --classes 2 --batch-sizes 2 --num-workers 0 --simulate 1GiB"
    )

    assert "UsageError: gpumem benchmark: a training step failed: ValueError: user forward says no" in shown
    assert "Traceback" not in shown


def test_with_debug_the_users_traceback_is_shown(ip, monkeypatch):
    monkeypatch.setenv("GPUMEM_DEBUG", "1")
    shown = run(
        ip, "%gpumem benchmark refusing --synthetic 8 --classes 2 --batch-sizes 2 --num-workers 0 --simulate 1GiB"
    )

    assert "Traceback" in shown and 'raise ValueError("user forward says no")' in shown
