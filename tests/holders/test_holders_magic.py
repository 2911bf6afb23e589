"""`%gpumem holders` and `gpumem_kernel.holders()`: the table, --json, --top, one-line errors, and the
post_run_cell hook the extension registers. CPU tensors stand in for CUDA ones (cuda_in_use patched)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import gpumem_kernel
from gpumem_kernel import extension
from gpumem_kernel.heldby import collect, hook
from gpumem_kernel.heldby.collect import NO_CUDA
from ipython_shell import fresh_shell

torch = pytest.importorskip("torch")


@pytest.fixture
def ip() -> Iterator[InteractiveShell]:
    with fresh_shell() as shell:
        shell.extension_manager.load_extension("gpumem_kernel")
        try:
            yield shell
        finally:
            shell.extension_manager.unload_extension("gpumem_kernel")


@pytest.fixture
def cpu_as_cuda(monkeypatch) -> None:
    on_cpu = (lambda tensor: tensor.device.type == "cpu"), 10**6
    monkeypatch.setattr(collect, "cuda_in_use", lambda: on_cpu)
    monkeypatch.setattr(hook, "cuda_in_use", lambda: on_cpu)


def run(ip: InteractiveShell, line: str):
    with capture_output() as captured:
        ip.run_cell(line)
    return captured


SETUP = "import torch\na = torch.ones(1000)\nb = a\nc = [torch.zeros(10), torch.zeros(20)]"


def test_the_table_json_and_top(ip, cpu_as_cuda):
    run(ip, SETUP)
    table = run(ip, "%gpumem holders").stdout
    assert table.startswith("CUDA memory held by your variables (976.56 KiB allocated):")
    assert "shared with `b`" in table and "list of 2 tensors" in table and "not reachable" in table
    data = json.loads(run(ip, "%gpumem holders --json --top 1").stdout)
    assert [e["name"] for e in data["entries"]] == ["a"] and data["more"] == 2
    assert data["reachable"] == 4000 + 120 and data["unreachable"] == 10**6 - 4120


def test_the_hook_keeps_the_last_cells_report(ip, cpu_as_cuda):
    run(ip, SETUP)
    last = extension.current().holders.last()
    assert last is not None and {e.name for e in last.entries} == {"a", "b", "c"}
    assert last.budget_ms == collect.DEFAULT_BUDGET_MS


def test_without_cuda_one_line_and_the_hook_walks_nothing(ip):
    run(ip, SETUP)
    assert extension.current().holders.last() is None
    assert run(ip, "%gpumem holders").stdout.strip() == f"CUDA memory held by your variables: {NO_CUDA}"
    assert gpumem_kernel.holders().note == NO_CUDA  # the Python API


@pytest.mark.parametrize(
    "line, message",
    [
        ("%gpumem holders --top 0", "argument --top: expected an integer from 1 to 2147483647, got '0'"),
        ("%gpumem holders --top", "argument --top: expected one argument"),
        ("%gpumem holders --budget soon", "argument --budget: expected an integer from 1 to 2147483647, got 'soon'"),
        ("%gpumem holders everything", "unrecognized arguments: everything"),
    ],
)
def test_bad_input_is_one_line(ip, line, message):
    captured = run(ip, line)
    assert captured.stderr.strip() == f"UsageError: gpumem holders: {message}"
    assert "Traceback" not in captured.stdout + captured.stderr


def test_help_names_the_options(ip):
    assert run(ip, "%gpumem holders --help").stdout.startswith(
        "usage: %gpumem holders [--json] [--top N] [--budget MS]"
    )


def test_the_python_api_is_callable_before_and_after_the_package_is_imported():
    code = (
        "import gpumem_kernel\n"
        "first = gpumem_kernel.holders()\n"  # through gpumem_kernel.__getattr__
        "import gpumem_kernel.heldby.hook\n"  # the import binds the package itself
        "print(first.note == gpumem_kernel.holders().note, 'torch' in __import__('sys').modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "False"]  # and importing it imports no torch
