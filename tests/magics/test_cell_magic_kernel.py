"""`%%gpumem` in a real ipykernel: a failing cell fails exactly as it would without the magic."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from kernel_harness import KernelHarness, Received, plain_lines

pytestmark = pytest.mark.kernel

FAILING = "def inner():\n    raise ValueError('boom')\ninner()"


@pytest.fixture(scope="module")
def kernel():
    with KernelHarness() as harness:
        harness.bootstrap()
        yield harness


def outputs(kernel: KernelHarness, msg_id: str) -> List[Received]:
    return [
        r
        for r in kernel.messages()
        if r.parent_id == msg_id and r.msg_type in ("error", "display_data", "stream", "execute_result")
    ]


def test_a_failing_cell_fails_as_without_the_magic_and_still_shows_its_peak_and_delta(kernel):
    plain = kernel.execute(FAILING)
    reply = kernel.execute("%%gpumem\n" + FAILING)

    assert plain["status"] == "error"
    assert (reply["status"], reply["ename"], reply["evalue"]) == ("error", "ValueError", "boom")
    assert reply["traceback"][-1] == plain["traceback"][-1]
    assert any("inner()" in line for line in plain_lines(reply["traceback"]))
    assert not any("gpumem_kernel" in line or "run_cell_magic" in line for line in reply["traceback"])
    shown = outputs(kernel, reply["msg_id"])
    errors = [r for r in shown if r.msg_type == "error"]
    assert len(errors) == 1 and errors[0].content["ename"] == "ValueError"  # the user's, once; none of ours
    assert errors[0].content["traceback"] == reply["traceback"]
    report = [r for r in shown if r.msg_type == "display_data"]
    assert len(report) == 1
    assert report[0].content["data"]["text/plain"].startswith("%%gpumem: the cell ran in ")
    assert "(it raised an error)" in report[0].content["data"]["text/plain"]


def test_run_all_stops_at_a_failing_gpumem_cell(kernel):
    # Run All queues every cell with stop_on_error: the cells after a failing one are aborted, not run. ipykernel
    # aborts the requests that reached it before the failing cell's error; one that arrives later runs. The failing
    # cell takes a second first, so that on a loaded machine the next request has surely reached the kernel.
    first = kernel.kc.execute("%%gpumem\nimport time\ntime.sleep(1)\nraise ValueError('boom')")
    second = kernel.kc.execute("after_the_failure = 1")
    replies: Dict[str, Any] = {}
    for msg_id in (first, second):
        replies[msg_id] = kernel._shell_reply(msg_id, 60)["content"]
        kernel.wait_idle(msg_id)
    assert replies[first]["status"] == "error" and replies[first]["ename"] == "ValueError"
    assert replies[second]["status"] == "aborted"
    assert kernel.evaluate("'after_the_failure' in globals()") is False


def test_a_passing_cell_still_succeeds_and_keeps_its_result(kernel):
    reply = kernel.execute("%%gpumem\nkept = 41\nkept + 1")
    assert reply["status"] == "ok"
    assert kernel.evaluate("kept") == 41
    shown = outputs(kernel, reply["msg_id"])
    assert [r.content["data"]["text/plain"] for r in shown if r.msg_type == "execute_result"] == ["42"]
    assert not [r for r in shown if r.msg_type == "error"]
