"""The tour notebooks in examples/ run headless on a CPU-only machine (nbclient, this venv's Python as the
kernel, the repository on PYTHONPATH), each in a temporary folder, and show no error. A cell tagged
`raises-exception` (05's out-of-memory on purpose) must raise an out-of-memory error and show the checklist."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from gpumem_kernel.oom.bundle import OOM_MIME
from kernel_harness import KernelHarness

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.ipynb"))


def test_there_is_a_notebook_per_capability_and_their_outputs_are_stripped():
    names = [path.stem for path in EXAMPLES]
    assert names == [
        "01-monitor",
        "02-analyze-and-recommend",
        "03-autobatch",
        "04-benchmark",
        "05-oom-and-recover",
        "06-timeline",
        "07-will-my-fine-tune-fit",
    ]
    for path in EXAMPLES:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_the_notebook_runs_without_an_error(path, tmp_path):
    book = nbformat.read(path, as_version=4)
    harness = KernelHarness(python=sys.executable)  # its kernelspec: this Python, the repository on PYTHONPATH
    try:
        client = NotebookClient(
            book, km=harness.km, timeout=240, resources={"metadata": {"path": str(tmp_path)}}, allow_errors=False
        )
        started = time.monotonic()
        client.execute(cwd=str(tmp_path))
        print(f"{path.name}: {time.monotonic() - started:.1f} s")
    finally:
        harness.stop()
    for index, cell in enumerate(book.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        stderr = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")
        if "raises-exception" in cell.metadata.get("tags", []):
            assert errors and "out of memory" in errors[0].evalue, (index, cell.outputs)
            assert any(OOM_MIME in o.get("data", {}) for o in cell.outputs), index  # the checklist under it
        else:
            assert not errors, (path.name, index, errors)
            assert "Error" not in stderr and "Traceback" not in stderr, (path.name, index, stderr)
