"""`%gpumem analyze MODEL --step FUNC` (the user's own training step) and `--keep-grads`, in an in-process
IPython shell."""

import json

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME  # noqa: E402

SETUP = """\
import torch
import torch.nn.functional as F
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
opt = torch.optim.AdamW(model.parameters())
both = (opt, torch.optim.SGD(model.parameters(), lr=0.1))
def make_batch(b):
    return torch.randn(b, 32), torch.randint(0, 10, (b,))
def train_step(model, opt, batch):
    x, y = batch
    loss = F.cross_entropy(model(x.cuda()), y.cuda())
    loss.backward()
    opt.step()
    opt.zero_grad()
def two_step(model, opts, batch):
    x, y = batch
    F.cross_entropy(model(x), y).backward()
    for o in opts:
        o.step()
        o.zero_grad()
"""


@pytest.fixture(scope="module")
def ip():
    with gpumem_shell() as shell:
        run(shell, SETUP)
        yield shell


def run(ip, code: str):
    with capture_output() as captured:
        ip.run_cell(code)
    return captured


def test_a_step_of_ones_own_is_analysed_and_named(ip):
    captured = run(ip, "%gpumem analyze model -b 16 --input make_batch --step train_step --optimizer opt")

    assert captured.stderr == "", captured.stderr
    payload = captured.outputs[0].data[ANALYSIS_MIME]
    params = (32 * 64 + 64 + 64 * 10 + 10) * 4
    assert payload["optimizer_bytes"] == 2 * params
    assert any("your step train_step(model, optimizer, batch) traced" in n for n in payload["notes"])
    assert not ip.user_ns["opt"].state  # the user's optimizer never stepped


def test_a_tuple_of_optimizers_goes_to_the_step_as_given(ip):
    captured = run(ip, "%gpumem analyze model -b 16 --input make_batch --step two_step --optimizer both")

    assert captured.stderr == "", captured.stderr
    payload = captured.outputs[0].data[ANALYSIS_MIME]
    assert payload["optimizer_bytes"] == 2 * (32 * 64 + 64 + 64 * 10 + 10) * 4  # AdamW's; plain SGD keeps none


def test_keep_grads_says_so_and_costs_the_gradients(ip):
    base = run(ip, "%gpumem analyze model -b 16 --input 32 --json").stdout
    kept = run(ip, "%gpumem analyze model -b 16 --input 32 --keep-grads --json").stdout

    base_payload, kept_payload = json.loads(base), json.loads(kept)
    assert any("gradients kept between steps" in n for n in kept_payload["notes"])
    assert kept_payload["peak_live_bytes"] >= base_payload["peak_live_bytes"]


@pytest.mark.parametrize(
    "line, message",
    [
        ("%gpumem analyze model --step opt --input make_batch", "--step opt: a AdamW is not callable"),
        ("%gpumem analyze model --step nope", "--step: no variable named 'nope'"),
        (
            "%gpumem analyze model --step train_step --optimizer make_batch --input make_batch",
            "--optimizer make_batch: a function, not a torch.optim.Optimizer (or a tuple, list or dict of them)",
        ),
    ],
)
def test_bad_steps_are_one_line(ip, line, message):
    captured = run(ip, line)
    assert captured.stderr.startswith("UsageError: gpumem analyze: ") and message in captured.stderr, captured.stderr
    assert captured.stderr.count("\n") == 1 and "Traceback" not in captured.stdout + captured.stderr
