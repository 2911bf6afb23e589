"""`--eval-batch N` in `%gpumem analyze` and `python -m gpumem_kernel analyze`: the evaluation
step's peak and the largest evaluation batch, in the text and the payload; bad values are one line."""

from __future__ import annotations

import json

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME  # noqa: E402
from gpumem_kernel import cli  # noqa: E402
from gpumem_kernel.wire.protocol import load_payload_schema  # noqa: E402

import jsonschema  # noqa: E402

MODELS = """\
import torch


def dropout_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Dropout(0.2), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))
"""


def _check(payload: dict, batch: int, training_batch: int) -> dict:
    jsonschema.Draft202012Validator(load_payload_schema("analysis")).validate(payload)
    evaluation = payload["evaluation"]
    assert evaluation["batch"] == batch and evaluation["training_batch"] == training_batch
    assert evaluation["rule_of_thumb_batch"] == int(training_batch * 1.3)
    assert evaluation["max_batch"] > payload["recommendations"]["maximum"]  # no gradients, no optimizer state
    return evaluation


def test_the_magic_shows_the_evaluation_step() -> None:
    with gpumem_shell() as ip:
        with capture_output() as setup:
            ip.run_cell(
                "import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), "
                "torch.nn.Dropout(0.1), torch.nn.Linear(64, 10))"
            )
        assert setup.stderr == ""
        with capture_output() as captured:
            ip.run_cell("%gpumem analyze model -b 16 --memory 2GiB --eval-batch 64")
        assert captured.stderr == "" and len(captured.outputs) == 1
        bundle = captured.outputs[0].data
        evaluation = _check(bundle[ANALYSIS_MIME], 64, 16)
        text = bundle["text/plain"]
        assert "Evaluation at batch 64: " in text
        assert f"largest evaluation batch {evaluation['max_batch']}" in text
        assert "at most 1.3 x the training batch (20 for 16) unless measured" in text
        with capture_output() as plain:
            ip.run_cell("%gpumem analyze model -b 16 --memory 2GiB")
        assert plain.outputs[0].data[ANALYSIS_MIME]["evaluation"] is None
        assert "Evaluation at batch" not in plain.outputs[0].data["text/plain"]
        for bad in ("0", "x", "-4"):
            with capture_output() as captured:
                ip.run_cell(f"%gpumem analyze model -b 16 --eval-batch {bad}")
            assert captured.stderr.startswith("UsageError: gpumem analyze: ") and captured.outputs == []
            assert "argument --eval-batch: expected an integer from 1 to" in captured.stderr
            assert captured.stderr.strip().count("\n") == 0, captured.stderr


def test_the_cli_takes_eval_batch(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "eval_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    argv = ["analyze", "--model", "eval_models:dropout_mlp", "--batch", "8", "--memory", "2GiB", "--eval-batch", "32"]
    assert cli.main(argv + ["--format", "json"]) == 0
    evaluation = _check(json.loads(capsys.readouterr().out), 32, 8)
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "Evaluation at batch 32: " in out and f"largest evaluation batch {evaluation['max_batch']}" in out
    code = cli.main(argv[:-1] + ["0"])
    err = capsys.readouterr().err
    assert code == 2 and "argument --eval-batch: expected an integer from 1 to" in err and err.count("\n") == 1
