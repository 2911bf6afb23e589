"""The OOM actions in a real ipykernel, driven as the browser drives it: the OOM checklist under a cell's traceback,
the main-thread actions as silent executes (frontend.py), and the comm's process actions."""

from __future__ import annotations

import json
import re
import time
from typing import Any, Dict, List

import jsonschema
import psutil
import pytest

from gpumem_kernel.wire.protocol import load_payload_schema
from gpumem_kernel.oom.bundle import OOM_MIME
from gpumem_kernel.wire.protocol import validate
from kernel_harness import KernelHarness

pytestmark = pytest.mark.kernel

OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which "
    "1.10 GiB is free. Of the allocated memory 13.90 GiB is allocated by PyTorch, and 120.00 MiB is "
    "reserved by PyTorch but unallocated."
)
# torch.OutOfMemoryError when the kernel's Python has torch; otherwise (the ipykernel 6 test venv) a stand-in
# with the same name and module, which is how the handler recognises it without importing torch.
OOM_CLASS = """
try:
    import torch
    OutOfMemoryError = torch.OutOfMemoryError
except ImportError:
    class OutOfMemoryError(RuntimeError):
        pass
    OutOfMemoryError.__module__ = "torch"
"""
ENTRY = "__import__('gpumem_kernel').frontend"


@pytest.fixture(scope="module")
def kernel():
    with KernelHarness() as harness:
        harness.bootstrap()
        yield harness


@pytest.fixture(scope="module")
def comm(kernel) -> Dict[str, Any]:
    comm_id = kernel.open_comm({"type": "open", "protocol": 1, "client": "pytest"})
    hello = kernel.wait_comm(comm_id, "hello")
    return {"id": comm_id, "hello": hello, "count": 0}


def call(kernel: KernelHarness, expression: str) -> Dict[str, Any]:
    """A frontend.py entry point through a silent execute's user_expressions, decoded as the browser does."""
    answer = json.loads(kernel.evaluate(f"{ENTRY}.{expression}"))
    assert answer["ok"] is True, answer
    return answer


def ask(
    kernel: KernelHarness, comm: Dict[str, Any], action: str, args: Dict[str, Any], subshell: Any = None
) -> Dict[str, Any]:
    comm["count"] += 1
    request_id = f"r-{action}-{comm['count']}"
    start = len(kernel.messages())
    kernel.send_comm(comm["id"], {"type": "request", "id": request_id, "action": action, "args": args}, subshell)
    message = kernel.wait_for(lambda r: (r.comm_data(comm["id"]) or {}).get("id") == request_id, 15, start)
    data = message.comm_data(comm["id"])
    validate(data)
    assert data["type"] == "reply", data
    return data["result"]


def gpus_seen(kernel: KernelHarness) -> bool:
    """Whether the kernel's probe sees a GPU on this machine (its NVML lists one), as its process actions do."""
    return kernel.evaluate(
        "__import__('gpumem_kernel.probe.processes', fromlist=['_']).gpu_usage("
        "__import__('gpumem_kernel.probe.prober', fromlist=['_']).probe().to_dict()) is not None"
    )


def pids(*items: Dict[str, Any]) -> Dict[str, List[Dict[str, Any]]]:
    return {"pids": [{"pid": item["pid"], "create_time": item["create_time"]} for item in items]}


def test_an_oom_shows_the_traceback_and_the_checklist_and_last_oom_returns_it(kernel):
    kernel.execute(OOM_CLASS)
    start = len(kernel.messages())
    reply = kernel.execute(f"def step():\n    raise OutOfMemoryError({OOM_MESSAGE!r})\nstep()")

    assert reply["status"] == "error" and reply["ename"] == "OutOfMemoryError"
    ours = [r for r in kernel.messages()[start:] if r.parent_id == reply["msg_id"]]
    assert [r.msg_type for r in ours if r.msg_type in ("error", "display_data")] == ["error", "display_data"]
    error = next(r for r in ours if r.msg_type == "error").content
    traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error["traceback"]))
    assert error["ename"] == "OutOfMemoryError" and "step()" in traceback and "CUDA out of memory" in traceback
    shown = next(r for r in ours if r.msg_type == "display_data").content["data"]
    assert set(shown) == {OOM_MIME, "text/html", "text/plain"}
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(shown[OOM_MIME])
    assert shown[OOM_MIME]["info"]["tried_to_allocate"] == 2 * 1024**3

    # Sent after the error reply: ipykernel aborts requests queued behind a failing cell.
    assert call(kernel, "last_oom()")["oom"] == shown[OOM_MIME]
    from_text = call(kernel, f"oom_from_text({json.dumps(error['ename'] + ': ' + error['evalue'])})")["oom"]
    assert from_text["info"] == shown[OOM_MIME]["info"]


def test_clear_by_silent_execute_drops_the_traceback_and_keeps_variables(kernel):
    kernel.execute("kept = [1, 2, 3]")
    assert kernel.execute("raise ValueError('boom')")["status"] == "error"

    report = call(kernel, "clear()")["report"]

    jsonschema.Draft202012Validator(load_payload_schema("clear")).validate(report)
    assert report["dry_run"] is False and report["traceback_sources"] and report["deleted"] == []
    assert kernel.evaluate("kept") == [1, 2, 3]
    assert kernel.evaluate("hasattr(__import__('sys'), 'last_value')") is False
    assert call(kernel, "last_oom()")["oom"] is not None  # the checklist outlives the clear


def test_children_processes_and_terminate(kernel, comm):
    kernel.execute("import subprocess\nsleeper = subprocess.Popen(['sleep', '30'])")
    pid = kernel.evaluate("sleeper.pid")
    gpu_used = 0 if gpus_seen(kernel) else None  # a GPU that does not list the sleeper, or none to ask
    try:
        children = ask(kernel, comm, "children", {})["children"]
        sleeper = next(c for c in children if c["pid"] == pid)
        assert sleeper["name"] == "sleep" and sleeper["gpu_used"] == gpu_used
        assert abs(sleeper["create_time"] - psutil.Process(pid).create_time()) < 0.01

        state = ask(kernel, comm, "processes", pids(sleeper))["processes"]
        assert state == [
            {
                "pid": pid,
                "create_time": sleeper["create_time"],
                "alive": True,
                "same_process": True,
                "name": "sleep",
                "gpu_used": gpu_used,
            }
        ]

        wrong = dict(sleeper, create_time=sleeper["create_time"] - 60)
        refused = ask(kernel, comm, "terminate", pids(wrong))
        assert refused["terminated"] == [] and [r["pid"] for r in refused["refused"]] == [pid]
        assert kernel.evaluate("sleeper.poll()") is None

        assert ask(kernel, comm, "terminate", pids(sleeper)) == {"terminated": [pid], "refused": []}
        assert kernel.evaluate("sleeper.wait(5)") == -15  # SIGTERM; reaped by its owner
        assert not psutil.pid_exists(pid)
        assert ask(kernel, comm, "processes", pids(sleeper))["processes"][0]["alive"] is False
    finally:
        kernel.execute("sleeper.poll() is None and sleeper.kill()")


def test_terminate_refuses_the_kernel_itself(kernel, comm):
    me = {"pid": comm["hello"]["pid"], "create_time": comm["hello"]["create_time"]}
    assert abs(me["create_time"] - psutil.Process(me["pid"]).create_time()) < 0.01
    result = ask(kernel, comm, "terminate", pids(me))
    assert result == {"terminated": [], "refused": [{"pid": me["pid"], "reason": "this kernel"}]}
    assert psutil.pid_exists(me["pid"])


def test_process_requests_over_a_subshell_are_answered_while_a_cell_runs(kernel, comm):
    subshell = kernel.create_subshell()
    if subshell is None:
        pytest.skip("the kernel's ipykernel has no subshells (< 7)")
    msg_id = kernel.kc.execute("import time; time.sleep(3)")
    busy = kernel.wait_for(lambda r: r.msg_type == "execute_input" and r.parent_id == msg_id)
    asked = time.monotonic()
    ask(kernel, comm, "children", {}, subshell)
    answered = time.monotonic()
    idle = kernel.wait_idle(msg_id)
    assert busy.at < asked < answered < idle.at
