"""`%gpumem analyze ... --timeline [--save FILE]` in an in-process IPython shell and `python -m gpumem_kernel analyze
--timeline --save FILE` through cli.main: the timeline output after the analysis, the saved file, and every bad
combination as one line."""

from __future__ import annotations

import csv
import json
import os
import pickle
from pathlib import Path

import jsonschema
import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

import timeline_model  # noqa: E402
from conftest import gpumem_shell  # noqa: E402
from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME  # noqa: E402
from gpumem_kernel import cli  # noqa: E402
from gpumem_kernel.timeline.payload import TIMELINE_MIME, source_text  # noqa: E402
from gpumem_kernel.timeline.store import STORE  # noqa: E402

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas" / "timeline.schema.json").read_text()
)
LINE = "%gpumem analyze net -b 16 --input 256 --loss loss --timeline"


@pytest.fixture(scope="module")
def ip():
    with gpumem_shell({"net": timeline_model.Net(), "loss": timeline_model.loss}) as shell:
        yield shell


def run(ip, code: str):
    with capture_output() as captured:
        ip.run_cell(code)
    return captured


def test_the_timeline_follows_the_analysis(ip):
    captured = run(ip, LINE)
    assert captured.stderr == ""
    analysis, timeline = [o.data for o in captured.outputs]
    assert ANALYSIS_MIME in analysis and set(timeline) == {TIMELINE_MIME, "text/html", "text/plain"}
    payload = timeline[TIMELINE_MIME]
    jsonschema.Draft202012Validator(SCHEMA).validate(payload)
    assert payload["peak"]["bytes"] == analysis[ANALYSIS_MIME]["peak_allocated_bytes"]
    assert STORE.get(payload["id"]) is not None  # the export action can name it
    text = timeline["text/plain"]
    assert text.startswith("Memory timeline (predicted): Net, batch 16, AdamW, fp32 (traced step)")
    assert "alive at the peak, largest first (top 5 of" in text and text.count("\n  ") >= 5


def test_save_writes_the_full_history(ip, tmp_path):
    target = tmp_path / "step.csv"
    captured = run(ip, f"{LINE} --save {target}")
    assert f"timeline saved to {target}: CSV, one row per allocation" in captured.stdout
    rows = list(csv.DictReader(target.open()))
    payload = captured.outputs[1].data[TIMELINE_MIME]
    assert len(rows) == payload["events_total"] - sum(1 for r in rows if r["end"])  # one row per allocation
    snapshot = tmp_path / "step.pickle"
    run(ip, f"{LINE} --save {snapshot}")
    assert set(pickle.loads(snapshot.read_bytes())) >= {"segments", "device_traces"}


@pytest.mark.parametrize(
    "line, message",
    [
        (
            "%gpumem analyze net -b 16 --input 256 --save x.pickle",
            "--save writes the timeline's history: add --timeline",
        ),
        (f"{LINE} --json", "with JSON output, --timeline needs --save FILE.pickle|.csv"),
        (f"{LINE} --world-size 2", "--timeline is one device's whole step"),
        (f"{LINE} --strategy zero2", "--timeline is one device's whole step"),
        (f"{LINE} --save step.txt", "--save 'step.txt': a .pickle"),
        (f"{LINE} --save /no/such/dir/s.csv", "the folder '/no/such/dir' does not exist"),
        ("%gpumem recommend net -b 16 --input 256 --timeline", "unrecognized arguments: --timeline"),
    ],
)
def test_bad_combinations_are_one_line(ip, line, message):
    captured = run(ip, line)
    command = line.split()[1]
    assert captured.stderr.startswith(f"UsageError: gpumem {command}: ") and message in captured.stderr
    assert captured.stderr.count("\n") == 1 and captured.outputs == []


def test_json_with_save_prints_the_analysis_and_saves(ip, tmp_path):
    target = tmp_path / "s.pickle"
    captured = run(ip, f"{LINE} --json --save {target}")
    assert json.loads(captured.stdout.split("\ntimeline saved to")[0])["engine"] == "traced"
    assert captured.outputs == [] and target.exists()


@pytest.fixture
def session(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(timeline_model.__file__))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_cli_saves_the_timeline(session, capsys):
    code = cli.main(
        ["analyze", "--model", "timeline_model:Net", "-b", "8", "--input", "256", "--timeline", "--save", "t.pickle"]
    )
    out, err = capsys.readouterr()
    assert code == 0 and err == "", err
    assert "Memory timeline (predicted): Net, batch 8" in out and "timeline saved to t.pickle" in out
    data = pickle.loads((session / "t.pickle").read_bytes())
    assert data["device_traces"][0][0]["action"] == "segment_alloc"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--save", "t.csv"], "--save writes the timeline's history: add --timeline"),
        (["--timeline", "--format", "json"], "with JSON output, --timeline needs --save"),
        (["--timeline", "--save", "t.json"], "--save 't.json': a .pickle"),
    ],
)
def test_the_cli_refuses_bad_combinations_in_one_line(session, capsys, argv, message):
    code = cli.main(["analyze", "--model", "timeline_model:Net", "-b", "8", "--input", "256", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err


CELL_MODEL = """\
import torch
class CellNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 128)
    def forward(self, x):
        return torch.tanh(self.fc(x))
cellnet = CellNet()
"""


def test_a_model_defined_in_a_cell_is_named_by_its_cell(ip):
    number = ip.execution_count  # the number the next cell run with history gets: "In [number]"
    with capture_output():
        assert ip.run_cell(CELL_MODEL, store_history=True).success
    captured = run(ip, "%gpumem analyze cellnet -b 8 --input 64 --loss loss --timeline")
    payload = captured.outputs[1].data[TIMELINE_MIME]
    activations = [b for b in payload["bands"] if b["category"] == "activation"]
    frames = [payload["stacks"][b["stack"]]["frames"][payload["stacks"][b["stack"]]["source"]] for b in activations]
    tanh = [f for f in frames if f["name"] == "forward"]
    assert tanh and all(f["cell"] == number and f["line"] == 7 and f["user"] for f in tanh)
    assert source_text(payload, activations[0]["stack"]) == f"In [{number}], line 7 in forward"
