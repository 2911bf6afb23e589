"""In marimo, which has no `%` magics and shows the object a cell ends with: a cell ending with
`gpumem_kernel.watch()` shows the live widget (our front end, fed by the sampler thread through marimo's comm), and
a cell ending with `gpumem_kernel.analyze(...)` shows the report's tables. The notebook runs headless with
`marimo export html`, which runs every cell and writes what each showed and the widget models it opened."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytest.importorskip("marimo")
pytest.importorskip("anywidget")
pytest.importorskip("torch")

from gpumem_kernel.watchwidget.widget import ESM  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

NOTEBOOK = """
import marimo

app = marimo.App()


@app.cell
def _():
    import gpumem_kernel

    w = gpumem_kernel.watch()
    w
    return gpumem_kernel, w


@app.cell
def _(w):
    import threading

    # What the widget sends from now on, as marimo's comm passes it to the front end: a sample comes from the
    # sampler thread while this cell waits.
    arrived = threading.Event()
    _send = w.comm.send

    def _seen(data=None, metadata=None, buffers=None):
        if ((data or {}).get("content") or {}).get("type") == "sample":
            arrived.set()
        _send(data, metadata, buffers)

    w.comm.send = _seen
    print("a sample reached the widget's comm:", arrived.wait(60))
    return


@app.cell
def _(gpumem_kernel):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    gpumem_kernel.analyze(model, batch_size=8, input=(64,))
    return


if __name__ == "__main__":
    app.run()
"""


def _literal(page: str, key: str) -> Any:
    """The JSON value that follows `key` in the exported page's scripts."""
    start = page.index(key) + len(key)
    value, _ = json.JSONDecoder().raw_decode(page, start)
    return value


def _export(tmp_path: Path) -> str:
    notebook = tmp_path / "notebook.py"
    notebook.write_text(textwrap.dedent(NOTEBOOK).lstrip(), "utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "marimo", "export", "html", str(notebook), "-o", str(tmp_path / "out.html")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return (tmp_path / "out.html").read_text("utf-8")


@pytest.mark.timeout(300)
def test_a_marimo_cell_shows_the_live_watch_and_the_analysis_report(tmp_path):
    page = _export(tmp_path)
    cells: List[Dict[str, Any]] = _literal(page, '"session": ')["cells"]
    watch_cell, sample_cell, report_cell = cells

    shown = watch_cell["outputs"][0]["data"]["text/html"]
    assert "<marimo-anywidget" in shown  # marimo renders the widget itself, not a snapshot table
    models = {note["model_id"]: note["message"] for note in _literal(page, "modelNotifications: Object.freeze(")}
    (model_id,) = [model_id for model_id in models if model_id in shown]
    opened = models[model_id]
    assert opened["method"] == "open"
    assert opened["state"]["_anywidget_id"].endswith("GpuMemWatch")
    esm_url = opened["esm_spec"]["url"]
    assert base64.b64decode(esm_url.split(",", 1)[1]).decode("utf-8") == ESM.read_text("utf-8")

    said = "".join(line["text"] for line in sample_cell["console"] if line.get("name") == "stdout")
    assert "a sample reached the widget's comm: True" in said

    (report,) = report_cell["outputs"]
    assert list(report["data"]) == ["text/html"]  # the tables alone, not the bundle's types side by side
    assert "Memory of one training step" in report["data"]["text/html"]
    assert "model Sequential (2,212 parameters)" in report["data"]["text/html"]
