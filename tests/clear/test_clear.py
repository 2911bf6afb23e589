"""clear_gpu_memory and the OOM handler in an in-process IPython shell with real (CPU) torch."""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Dict, Iterator

import jsonschema
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gpumem_kernel.clear.reclaim import CLEAR_MIME, clear_bundle, clear_gpu_memory
from gpumem_kernel.wire.protocol import load_payload_schema
from gpumem_kernel.oom.bundle import OOM_MIME
from gpumem_kernel.oom.handler import install_oom_handler, last_oom, uninstall_oom_handler
from ipython_shell import fresh_shell

torch = pytest.importorskip("torch")

MILLION_FLOATS = 4 * 10**6  # bytes of torch.ones(10**6)
OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.75 GiB of which "
    "3.06 MiB is free. Process 123 has 14.74 GiB memory in use. Of the allocated memory 14.56 GiB is allocated "
    "by PyTorch, and 51.92 MiB is reserved by PyTorch but unallocated."
)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    with fresh_shell() as sh:
        sh.InteractiveTB.tb = None  # an earlier test's failed cell in this process leaves its traceback there
        run(sh, "import gc, weakref\nimport torch")
        yield sh


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def run(sh: InteractiveShell, code: str) -> Any:
    with capture_output():
        return sh.run_cell(code, store_history=True)


def alive(sh: InteractiveShell, ref: str = "w") -> bool:
    return sh.user_ns[ref]() is not None


def validate(report) -> Dict[str, Any]:
    payload = json.loads(json.dumps(report.to_payload()))
    jsonschema.Draft202012Validator(load_payload_schema("clear")).validate(payload)
    return payload


def make_traceback_tensor(sh: InteractiveShell) -> None:
    """A tensor that only the frames of a failed call reference (the state right after an OOM)."""
    run(sh, "def f():\n    t = torch.ones(10**6)\n    global w\n    w = weakref.ref(t)\n    raise ValueError('boom')")
    result = run(sh, "f()")
    assert isinstance(result.error_in_exec, ValueError)


def test_a_tensor_held_only_by_the_traceback_is_freed(shell) -> None:
    make_traceback_tensor(shell)
    run(shell, "gc.collect()")
    assert alive(shell)
    report = clear_gpu_memory(shell)
    assert not alive(shell)
    last = "sys.last_type/last_value/last_traceback" + ("/last_exc" if sys.version_info >= (3, 12) else "")
    assert last in report.traceback_sources
    assert report.traceback_frames >= 2
    assert report.traceback_freed.bytes == MILLION_FLOATS and report.traceback_freed.by_device == {
        "cpu": MILLION_FLOATS
    }
    assert not hasattr(sys, "last_traceback")
    assert report.gc_collected is not None and report.gc_collected >= 0
    assert not torch.cuda.is_initialized()  # clearing never initialises CUDA
    validate(report)


def test_the_failed_cells_execution_result_is_dropped_too(shell) -> None:
    make_traceback_tensor(shell)
    # After the failing cell, IPython's ExecutionResult still holds the exception (and so its frames).
    assert shell.last_execution_result.error_in_exec is not None
    report = clear_gpu_memory(shell)
    assert "last_execution_result.error_in_exec" in report.traceback_sources
    assert shell.last_execution_result.error_in_exec is None
    assert not alive(shell)


def test_a_tensor_held_only_by_the_output_cache_is_freed(shell) -> None:
    number = run(shell, "torch.ones(10**6)").execution_count  # (an ExecutionResult keeps its .result alive)
    run(shell, f"w = weakref.ref(Out[{number}])")
    assert alive(shell) and f"_{number}" in shell.user_ns
    report = clear_gpu_memory(shell)
    assert not alive(shell)
    assert number not in shell.user_ns["Out"] and f"_{number}" not in shell.user_ns
    (entry,) = report.output_cache
    assert entry.name.split(" / ")[:2] == [f"Out[{number}]", f"_{number}"]
    assert entry.bytes == MILLION_FLOATS and report.output_cache_entries >= 3
    assert shell.user_ns["_"] == ""  # IPython's initial value, so it keeps updating _ afterwards
    run(shell, "41 + 1")
    assert shell.user_ns["_"] == 42
    validate(report)


def test_output_cache_entries_without_tensors_stay(shell) -> None:
    result = run(shell, "'just a string'")
    clear_gpu_memory(shell)
    assert shell.user_ns["Out"][result.execution_count] == "just a string"


def test_user_variables_are_untouched_unless_named(shell) -> None:
    run(
        shell,
        "keep = torch.ones(1000)\nview = keep[:10]\nbatch = {'x': torch.ones(100), 'n': 3}\n"
        "_ = torch.ones(5)  # assigned by the user, not IPython's output cache\n"
        "model = torch.nn.Linear(1000, 1000)\nopt = torch.optim.Adam(model.parameters())\n"
        "model(torch.ones(2, 1000)).sum().backward()\nopt.step()",
    )
    objects = {name: shell.user_ns[name] for name in ("keep", "view", "batch", "_", "model", "opt")}
    report = clear_gpu_memory(shell)
    assert all(shell.user_ns[name] is value for name, value in objects.items())
    found = {h.name: h for h in report.holders}
    assert found["keep"].bytes == 4000 and found["keep"].shape == [1000] and found["keep"].dtype == "float32"
    assert "view" not in found  # a view of keep's storage counts once
    assert found["batch"].kind == "dict" and found["batch"].bytes == 400
    params = (1000 * 1000 + 1000) * 4
    assert found["model"].kind == "module" and found["model"].bytes == 2 * params  # weights + gradients
    assert found["opt"].kind == "optimizer" and found["opt"].bytes >= 2 * params  # exp_avg + exp_avg_sq (+ step)
    assert report.deleted == []
    validate(report)


def test_named_variables_are_deleted(shell) -> None:
    run(shell, "keep = torch.ones(10**6)\nother = torch.ones(10)\nw = weakref.ref(keep)")
    report = clear_gpu_memory(shell, variables=["keep"])
    assert "keep" not in shell.user_ns and "other" in shell.user_ns
    assert not alive(shell)
    assert [(h.name, h.bytes) for h in report.deleted] == [("keep", MILLION_FLOATS)]
    validate(report)


def test_deleting_a_variable_whose_tensor_is_shared_reports_nothing_freed(shell) -> None:
    run(shell, "a = torch.ones(10**6)\nb = a")
    report = clear_gpu_memory(shell, variables=["a"])
    assert report.deleted[0].bytes == 0 and "b" in shell.user_ns


@pytest.mark.parametrize(
    "names, words",
    [
        (["nope"], ["'nope'"]),
        (["keep", "nope", "nada"], ["'nope'", "'nada'"]),
        (["not a name"], ["not a variable name"]),
        (["Out"], ["'Out'", "IPython"]),
    ],
)
def test_bad_variable_names_give_one_line_and_change_nothing(shell, names, words) -> None:
    make_traceback_tensor(shell)
    run(shell, "keep = torch.ones(3)")
    with pytest.raises(ValueError) as raised:
        clear_gpu_memory(shell, variables=names)
    message = str(raised.value)
    assert "\n" not in message and all(word in message for word in words)
    assert "keep" in shell.user_ns and alive(shell) and hasattr(sys, "last_traceback")


def test_dry_run_changes_nothing(shell) -> None:
    make_traceback_tensor(shell)
    result = run(shell, "torch.ones(10**6)")
    run(shell, f"w2 = weakref.ref(Out[{result.execution_count}])\nkeep = torch.ones(10)")
    before = dict(shell.user_ns)
    report = clear_gpu_memory(shell, variables=["keep"], dry_run=True)
    assert alive(shell) and alive(shell, "w2") and hasattr(sys, "last_traceback")
    assert shell.user_ns == before and result.execution_count in shell.user_ns["Out"]
    assert report.dry_run and report.gc_collected is None and not report.emptied_cache
    assert report.traceback_freed.bytes == MILLION_FLOATS
    assert report.output_cache[0].bytes == MILLION_FLOATS
    assert [h.name for h in report.deleted] == ["keep"]
    assert all(row.reserved_after is None and row.this_kernel_after is None for row in report.devices)
    assert "would drop" in clear_bundle(report)["text/plain"]
    validate(report)


def test_all_cuda_vars_deletes_nothing_on_a_cpu_kernel(shell) -> None:
    run(shell, "keep = torch.ones(10)")
    report = clear_gpu_memory(shell, all_cuda_vars=True)
    assert "keep" in shell.user_ns and report.deleted == []


def test_clear_bundle_has_json_html_and_text(shell) -> None:
    make_traceback_tensor(shell)
    run(shell, "keep = torch.ones(1000)\nhostile_name_holder = {'<script>': torch.ones(4)}")
    bundle = clear_bundle(clear_gpu_memory(shell))
    assert set(bundle) == {CLEAR_MIME, "text/html", "text/plain"}
    text = bundle["text/plain"]
    assert "dropped the last error's traceback" in text and "host" in text and "keep" in text
    assert "<script>" not in bundle["text/html"]
    jsonschema.Draft202012Validator(load_payload_schema("clear")).validate(json.loads(json.dumps(bundle[CLEAR_MIME])))


def test_clear_without_torch_objects_or_errors_reports_nothing_to_drop(shell) -> None:
    report = clear_gpu_memory(shell)
    assert report.traceback_sources == [] and report.output_cache == [] and report.holders == []
    assert "nothing to drop" in clear_bundle(report)["text/plain"]


# --- the OOM handler ---------------------------------------------------------------------------------


def raise_oom(sh: InteractiveShell, cls: str = "torch.OutOfMemoryError"):
    with capture_output() as captured:
        result = sh.run_cell(
            f"def step():\n    big = torch.ones(10**6)\n    raise {cls}({OOM_TEXT!r})\nstep()", store_history=True
        )
    return result, captured


def test_an_oom_in_a_cell_shows_the_traceback_and_the_checklist(shell) -> None:
    assert install_oom_handler(shell, probe=lambda: None) == "OOM checklist installed"
    result, captured = raise_oom(shell)
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    assert "OutOfMemoryError" in captured.stdout and "step()" in plain(captured.stdout)  # the normal traceback
    (output,) = captured.outputs
    payload = output.data[OOM_MIME]
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(json.loads(json.dumps(payload)))
    # 51.92 MiB cached + 3.06 MiB free would have covered the 20 MiB request: fragmentation, then clearing
    assert [s["id"] for s in payload["steps"][:2]] == ["expandable-segments", "clear"]
    assert payload["diagnosis"]["traceback"]["bytes"] == MILLION_FLOATS  # `big` in the failed frame
    assert output.data["text/plain"].splitlines()[0].startswith("CUDA out of memory on GPU 0")
    assert last_oom(shell) == payload
    # The handler's frames are gone: clearing now frees the tensor the failed call held.
    report = clear_gpu_memory(shell)
    assert report.traceback_freed.bytes == MILLION_FLOATS


def test_the_old_runtime_error_form_also_gets_the_checklist(shell) -> None:
    install_oom_handler(shell, probe=lambda: None)
    _, captured = raise_oom(shell, "RuntimeError")
    assert "RuntimeError" in captured.stdout and len(captured.outputs) == 1


def test_other_errors_keep_the_normal_traceback_only(shell) -> None:
    install_oom_handler(shell, probe=lambda: None)
    with capture_output() as captured:
        result = shell.run_cell("raise RuntimeError('shape mismatch')", store_history=True)
    assert "RuntimeError" in captured.stdout and "shape mismatch" in captured.stdout
    assert captured.outputs == [] and isinstance(result.error_in_exec, RuntimeError)
    with capture_output() as captured:
        shell.run_cell("raise KeyError('k')", store_history=True)
    assert "KeyError" in captured.stdout and captured.outputs == []


def test_a_users_handler_keeps_running_and_is_restored(shell) -> None:
    seen = []

    def mine(self, etype, value, tb, tb_offset=None):
        seen.append(etype)
        print("my handler")

    shell.set_custom_exc((ValueError,), mine)
    message = install_oom_handler(shell, probe=lambda: None)
    assert "ValueError" in message and "first" in message
    with capture_output() as captured:
        shell.run_cell("raise ValueError('x')", store_history=True)
    assert seen == [ValueError] and "my handler" in captured.stdout and captured.outputs == []
    _, captured = raise_oom(shell)
    assert len(captured.outputs) == 1
    assert uninstall_oom_handler(shell) == "OOM checklist removed"
    assert shell.custom_exceptions == (ValueError,)
    with capture_output() as captured:
        shell.run_cell("raise ValueError('y')", store_history=True)
    assert seen == [ValueError, ValueError]


def test_install_twice_and_uninstall_without_install(shell) -> None:
    assert uninstall_oom_handler(shell) == "the OOM checklist is not installed"
    install_oom_handler(shell, probe=lambda: None)
    assert install_oom_handler(shell) == "the OOM checklist is already installed"
    assert uninstall_oom_handler(shell) == "OOM checklist removed"
    assert shell.custom_exceptions == ()


def test_a_failing_checklist_never_hides_the_traceback_or_unregisters_the_handler(shell) -> None:
    def broken_probe():
        raise OSError("NVML exploded")

    install_oom_handler(shell, probe=broken_probe)
    _, captured = raise_oom(shell)
    assert "OutOfMemoryError" in captured.stdout and captured.outputs == []
    assert "gpumem: could not build the OOM checklist: OSError: NVML exploded" in captured.stderr
    assert RuntimeError in shell.custom_exceptions


def test_clear_gpu_memory_is_part_of_the_package_api():
    import gpumem_kernel

    assert gpumem_kernel.clear_gpu_memory is clear_gpu_memory
    assert "clear_gpu_memory" in gpumem_kernel.__all__
