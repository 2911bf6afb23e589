"""A training step that raises (the user's forward, loss or input) is no bad option: autobatch says which exception
the step raised, as analyze does, and the user's traceback stays behind it."""

from __future__ import annotations

import re
import traceback

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from conftest import gpumem_shell  # noqa: E402
from user_state import assert_same, state_of  # noqa: E402
from gpumem_kernel.analysis.request.step_error import StepError  # noqa: E402
from gpumem_kernel.autobatch.search import auto_select_batch_size  # noqa: E402

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


def refusing_forward(model, batch):
    raise ValueError("user forward says no")


def test_the_step_error_names_the_users_exception_and_keeps_it():
    model = torch.nn.Linear(8, 2)
    before = state_of(model, None)
    with pytest.raises(StepError) as caught:
        auto_select_batch_size(model, input=(8,), simulate="1MiB", start_batch=2, forward=refusing_forward)

    assert str(caught.value) == "a training step failed: ValueError: user forward says no"
    assert isinstance(caught.value.__cause__, ValueError) and caught.value.error is caught.value.__cause__
    # the user's own frame ends the traceback behind the one line
    assert traceback.extract_tb(caught.value.__cause__.__traceback__)[-1].name == "refusing_forward"
    assert_same(before, state_of(model, None))


def test_the_magic_says_the_type_as_analyze_does(ip, monkeypatch):
    monkeypatch.delenv("GPUMEM_DEBUG", raising=False)
    shown = run(ip, "%gpumem autobatch refusing --simulate 1MiB --input 8 --batch 2")
    analysed = run(ip, "%gpumem analyze refusing --input 8 --batch 2")

    assert shown.startswith(
        "UsageError: gpumem autobatch: a training step failed: ValueError: user forward says no "
        "(check --input, --loss; GPUMEM_DEBUG=1 shows the traceback)"
    )
    assert shown.count("\n") <= 2 and "Traceback" not in shown  # the live line, then one error line
    assert "ValueError: user forward says no" in analysed  # analyze's words for the same step


def test_a_bad_option_is_still_just_its_message(ip):
    shown = run(ip, "%gpumem autobatch refusing --simulate lots --input 8")
    assert "UsageError: gpumem autobatch: --simulate: cannot read memory size 'lots'" in shown
    assert "training step" not in shown


def test_with_debug_the_users_traceback_is_shown(ip, monkeypatch):
    monkeypatch.setenv("GPUMEM_DEBUG", "1")
    shown = run(ip, "%gpumem autobatch refusing --simulate 1MiB --input 8 --batch 2")

    assert "Traceback" in shown and 'raise ValueError("user forward says no")' in shown
    assert "StepError: a training step failed: ValueError: user forward says no" in shown
