"""frontend.py: the browser's silent-execute entry points return JSON strings and never raise."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, Iterator

import jsonschema
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import gpumem_kernel
from gpumem_kernel.clear import reclaim as clearing
from gpumem_kernel.channel import frontend
from gpumem_kernel.wire.protocol import load_payload_schema
from gpumem_kernel.oom.handler import install_oom_handler
from ipython_shell import fresh_shell

OOM_TEXT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "15.70 GiB of which 1.10 GiB is free. Of the allocated memory 13.90 GiB is allocated by PyTorch, and "
    "120.00 MiB is reserved by PyTorch but unallocated."
)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with fresh_shell() as sh:
        yield sh


def answer(text: str) -> Dict[str, Any]:
    assert isinstance(text, str)
    return json.loads(text)


def run(sh: InteractiveShell, code: str) -> Any:
    with capture_output() as captured:
        sh.run_cell(code, store_history=True)
    return captured


def test_frontend_is_an_attribute_after_a_plain_import() -> None:
    assert gpumem_kernel.channel.frontend is frontend
    assert callable(gpumem_kernel.channel.frontend.clear)


def test_clear_is_the_safe_clear_and_its_report_validates(shell) -> None:
    run(shell, "x = [1, 2]\nraise ValueError('boom')")
    result = answer(frontend.clear())

    assert result["ok"] is True and set(result) == {"ok", "report"}
    report = result["report"]
    jsonschema.Draft202012Validator(load_payload_schema("clear")).validate(report)
    assert report["dry_run"] is False and report["traceback_sources"] and report["deleted"] == []
    assert shell.user_ns["x"] == [1, 2] and not hasattr(sys, "last_value")


def test_clear_dry_run_changes_nothing(shell) -> None:
    run(shell, "raise ValueError('boom')")
    report = answer(frontend.clear(dry_run=True))["report"]
    assert report["dry_run"] is True and report["traceback_sources"] and hasattr(sys, "last_value")


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda: frontend.clear(dry_run="yes"), "TypeError: dry_run must be true or false, got 'yes'"),
        (lambda: frontend.oom_from_text(None), "TypeError: text must be a string, got NoneType"),
    ],
)
def test_bad_arguments_are_an_error_answer(call, error) -> None:
    assert answer(call()) == {"ok": False, "error": error}


def test_a_failure_inside_is_one_line_not_a_traceback(monkeypatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("walking the namespace failed\nsecond line")

    monkeypatch.setattr(clearing, "clear_gpu_memory", broken)
    assert answer(frontend.clear()) == {"ok": False, "error": "RuntimeError: walking the namespace failed"}


def test_last_oom_is_null_until_the_handler_sees_one(shell) -> None:
    install_oom_handler(shell)
    assert answer(frontend.last_oom()) == {"ok": True, "oom": None}

    shown = run(shell, f"raise RuntimeError({OOM_TEXT.split(': ', 1)[1]!r})").outputs[0].data
    result = answer(frontend.last_oom())

    assert result["ok"] is True and result["oom"] == json.loads(json.dumps(shown["application/vnd.gpumem.oom.v1+json"]))
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(result["oom"])


def test_last_oom_builds_the_checklist_for_an_oom_the_handler_did_not_see(shell) -> None:
    run(shell, f"raise RuntimeError({OOM_TEXT.split(': ', 1)[1]!r})")  # no handler installed
    oom = answer(frontend.last_oom())["oom"]
    assert oom is not None and oom["info"]["tried_to_allocate"] == 2 * 1024**3


def test_oom_from_text_reads_an_iopub_traceback_with_colour_codes(shell) -> None:
    coloured = "\x1b[0;31mOutOfMemoryError\x1b[0m: " + OOM_TEXT.split(": ", 1)[1]
    for text in (OOM_TEXT, coloured):
        oom = answer(frontend.oom_from_text(text))["oom"]
        jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(oom)
        assert oom["info"]["free"] == round(1.10 * 1024**3) and oom["info"]["total_capacity"] == round(15.70 * 1024**3)
    assert answer(frontend.oom_from_text("ValueError: shapes do not match")) == {"ok": True, "oom": None}
