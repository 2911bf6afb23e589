"""The tour notebooks in examples/ run headless on a CPU-only machine (nbclient, this venv's Python as the
kernel, the repository on PYTHONPATH), each in a temporary folder, and show no error. A cell tagged
`raises-exception` (05's out-of-memory on purpose) must raise an out-of-memory error and show the checklist.
Each tour's first cell loads the kernel side where nothing loaded it and says nothing where the panel did; 06's
timeline names the notebook cell that defines the model's forward as "In [N], line L"."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from gpumem_kernel.analysis.report.render import MIME as ANALYSIS_MIME
from gpumem_kernel.oom.bundle import OOM_MIME
from gpumem_kernel.timeline.payload import TIMELINE_MIME
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


# A tour runs whole, cell after cell: 07 plans three 8B steps (QLoRA, DoRA, generation), 10 to 20 s each on an idle
# 2-core machine and minutes on a loaded one, and what makes a full fine-tune fit (the 8B step analysed again with a
# lever set, seven times, about 20 s idle), so the whole notebook gets more than the suite's 300 s per test; each
# cell keeps its own 360 s limit (NotebookClient's timeout).
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_the_notebook_runs_without_an_error(path, tmp_path):
    book = nbformat.read(path, as_version=4)
    harness = KernelHarness(python=sys.executable)  # its kernelspec: this Python, the repository on PYTHONPATH
    try:
        client = NotebookClient(
            book, km=harness.km, timeout=360, resources={"metadata": {"path": str(tmp_path)}}, allow_errors=False
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
    if path.stem == "06-timeline":
        _the_timeline_names_the_models_cell(book)
    if path.stem == "07-will-my-fine-tune-fit":
        _the_full_fine_tune_is_told_what_makes_it_fit(book)


def _the_full_fine_tune_is_told_what_makes_it_fit(book) -> None:
    """07's full fine-tune of the 8B model does not fit the 24 GB GPU, and its report's table has a recommended
    change that does, with the command to run it, and a row that fits and keeps full training (FSDP with an optimizer
    change: no adapters)."""
    cell = next(c for c in book.cells if c.cell_type == "code" and "--advise" in c.source)
    payload = next(o["data"][ANALYSIS_MIME] for o in cell.outputs if ANALYSIS_MIME in o.get("data", {}))
    assert payload["recommendations"]["current"]["status"] == "will-not-fit"
    advice = payload["advice"]
    assert advice["target"] == "RTX 4090" and len(advice["rows"]) >= 8
    chosen = advice["rows"][advice["recommended"]]
    assert chosen["fits"] and chosen["command"].startswith("%gpumem analyze llama-3-8b ")
    full = [r for r in advice["rows"] if r["fits"] and "+fsdp-" in r["key"]]
    assert full and "--lora" not in full[0]["flags"] and full[0]["per_rank"], advice["rows"]


def _the_timeline_names_the_models_cell(book) -> None:
    """The rows of 06's timeline that the model's forward allocated say "In [N], line L" with N the execution count
    of the cell that defines it, as the user sees it left of that cell."""
    code = [cell for cell in book.cells if cell.cell_type == "code"]
    defining = next(cell for cell in code if "def forward" in cell.source)
    payloads = [o["data"] for cell in code for o in cell.outputs if TIMELINE_MIME in o.get("data", {})]
    assert len(payloads) == 1, "06 shows one timeline"
    stacks = payloads[0][TIMELINE_MIME]["stacks"]
    named = [s["frames"][s["source"]] for s in stacks if s["source"] is not None]
    assert any(f["cell"] == defining.execution_count and f["name"] == "forward" for f in named), named
    assert f"In [{defining.execution_count}], line " in payloads[0]["text/plain"]


LOAD_CELL = "\n".join(
    nbformat.read(EXAMPLES[0], as_version=4).cells[1].source.splitlines()[:4]
)  # 01's first code cell begins with the lines that load the kernel side


def test_every_tour_loads_the_kernel_side_the_same_way():
    for path in EXAMPLES:
        first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert first.source.startswith(LOAD_CELL), path.name


@pytest.mark.parametrize("panel", [True, False], ids=["loaded by the panel", "plain Jupyter"])
def test_the_first_cell_loads_the_kernel_side_once_and_says_nothing(panel):
    """In JupyterLab the panel has loaded the kernel side when the first cell runs: `%load_ext` would print "The
    gpumem_kernel extension is already loaded"; elsewhere nothing has, and the cell must load it."""
    harness = KernelHarness(python=sys.executable).start()
    try:
        if panel:
            harness.bootstrap()  # what the browser runs when the kernel is ready
        start = len(harness.messages())
        assert harness.execute(LOAD_CELL)["status"] == "ok"
        said = [m.content for m in harness.messages()[start:] if m.msg_type in ("stream", "display_data", "error")]
        assert said == []
        assert harness.evaluate("'gpumem_kernel' in get_ipython().extension_manager.loaded") is True
        assert harness.execute("%gpumem status")["status"] == "ok"  # the magics are there
    finally:
        harness.stop()
