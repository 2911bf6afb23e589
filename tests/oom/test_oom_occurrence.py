"""Each OOM checklist names its occurrence: one error in one run of the kernel process.

The browser keeps the checklist's ticks under the occurrence's id (so a new error starts unticked) and tells a
checklist of an earlier kernel run by the kernel's (pid, start time), which `hello` carries too.
"""

from __future__ import annotations

import json
import os
from typing import Iterator

import jsonschema
import psutil
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpumem_kernel.oom.bundle import OOM_MIME, checklist_bundle
from gpumem_kernel.oom.handler import install_oom_handler, last_oom, last_oom_bundle
from gpumem_kernel.probe.processes import own_create_time
from gpumem_kernel.wire.protocol import load_payload_schema
from ipython_shell import fresh_shell

torch = pytest.importorskip("torch")

OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.75 GiB of which "
    "3.06 MiB is free. Of the allocated memory 14.56 GiB is allocated by PyTorch, and 51.92 MiB is reserved "
    "by PyTorch but unallocated."
)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with fresh_shell() as sh:
        with capture_output():
            sh.run_cell("import torch", store_history=True)
        yield sh


def fail(sh: InteractiveShell) -> dict:
    """Run a cell that raises a real torch.OutOfMemoryError; returns the checklist payload it showed."""
    with capture_output() as captured:
        sh.run_cell(f"raise torch.OutOfMemoryError({OOM_TEXT!r})", store_history=True)
    (output,) = captured.outputs
    payload = output.data[OOM_MIME]
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(json.loads(json.dumps(payload)))
    return payload


def test_each_error_is_its_own_occurrence_of_this_kernel_run(shell) -> None:
    install_oom_handler(shell, probe=lambda: None)
    first = fail(shell)["occurrence"]
    second = fail(shell)["occurrence"]

    assert first["id"] != second["id"]  # the same message twice is still two errors: ticks start anew
    # The kernel run, as hello names it: (pid, create_time).
    assert first["kernel_pid"] == second["kernel_pid"] == os.getpid()
    assert first["kernel_start"] == own_create_time() == psutil.Process().create_time()
    assert first["time"] <= second["time"]


def test_the_panel_gets_the_occurrence_the_cell_shows(shell) -> None:
    install_oom_handler(shell, probe=lambda: None)
    shown = fail(shell)
    assert last_oom(shell)["occurrence"] == shown["occurrence"]
    assert last_oom_bundle(shell)[OOM_MIME]["occurrence"]["id"] == shown["occurrence"]["id"]


def test_a_checklist_built_from_text_is_a_new_occurrence() -> None:
    a = checklist_bundle(OOM_TEXT, sample=None, env={})[OOM_MIME]["occurrence"]
    b = checklist_bundle(OOM_TEXT, sample=None, env={})[OOM_MIME]["occurrence"]
    assert a["id"] != b["id"] and a["kernel_pid"] == os.getpid()


def test_outputs_saved_by_older_kernels_without_an_occurrence_still_validate() -> None:
    payload = checklist_bundle(OOM_TEXT, sample=None, env={})[OOM_MIME]
    del payload["occurrence"]
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(json.loads(json.dumps(payload)))
