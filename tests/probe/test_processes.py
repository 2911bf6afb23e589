"""children / processes / terminate: the comm actions on PIDs, through the Channel and on their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import jsonschema
import psutil
import pytest

from fake_nvml import FakeGpu, GiB
from gpumem_kernel.probe import processes
from gpumem_kernel.channel.comm import Channel
from gpumem_kernel.wire.protocol import ACTIONS, CAPABILITIES, ProcessRef, ProtocolError, parse_process_refs, validate
from gpumem_kernel.probe.sampler import Sampler
from fake_comm import FakeComm, open_msg

IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)


@pytest.fixture
def child() -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(["sleep", "30"])
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def ref(pid: int, shift: float = 0.0) -> ProcessRef:
    return ProcessRef(pid, psutil.Process(pid).create_time() + shift)


def args(*refs: ProcessRef) -> Dict[str, Any]:
    return {"pids": [{"pid": r.pid, "create_time": r.create_time} for r in refs]}


@pytest.fixture
def channel_with(make_prober):
    """A Channel whose sampler's GPU lists the given (pid, bytes); returns a request function."""

    def make(gpu_processes: List[tuple]):
        sampler = Sampler(make_prober([FakeGpu("NVIDIA Test GPU", "GPU-1", processes=gpu_processes)]))
        sampler.sample_once()
        channel, comm = Channel(sampler, "0.1.0"), FakeComm()
        channel._on_open(comm, open_msg({"type": "open", "protocol": 1}))

        def request(action: str, request_args: Dict[str, Any]) -> Dict[str, Any]:
            comm.browser_sends({"type": "request", "id": f"r-{action}", "action": action, "args": request_args})
            validate(comm.sent[-1])
            return comm.sent[-1]

        return request

    return make


def test_hello_announces_the_process_actions():
    assert {"children", "processes", "terminate"} <= set(CAPABILITIES)


def test_children_lists_descendants_with_their_gpu_use(channel_with, child):
    request = channel_with([(child.pid, 2 * GiB)])
    reply = request("children", {})

    assert reply["type"] == "reply"
    mine = [c for c in reply["result"]["children"] if c["pid"] == child.pid]
    assert len(mine) == 1
    assert mine[0]["name"] == "sleep" and mine[0]["rss"] > 0 and mine[0]["gpu_used"] == 2 * GiB
    assert abs(mine[0]["create_time"] - psutil.Process(child.pid).create_time()) < 0.01


def test_processes_tells_the_same_process_from_a_reused_pid(channel_with, child):
    request = channel_with([])
    gone = subprocess.Popen(["true"])
    gone_ref = ProcessRef(gone.pid, psutil.Process(gone.pid).create_time() if psutil.pid_exists(gone.pid) else 1.0)
    gone.wait()
    same, reused = ref(child.pid), ref(child.pid, shift=5.0)

    states = request("processes", args(same, reused, gone_ref))["result"]["processes"]

    assert [(s["alive"], s["same_process"]) for s in states] == [(True, True), (True, False), (False, False)]
    assert states[0]["name"] == "sleep" and states[0]["gpu_used"] == 0  # a GPU is visible and does not list it
    assert states[1]["name"] is None and states[1]["gpu_used"] is None  # someone else's figures are not shown


def test_terminate_refuses_a_wrong_start_time_and_ends_the_right_one(channel_with, child):
    request = channel_with([])
    refused = request("terminate", args(ref(child.pid, shift=-3.0)))["result"]
    assert refused["terminated"] == [] and refused["refused"][0]["pid"] == child.pid
    assert "start time" in refused["refused"][0]["reason"] and child.poll() is None

    ended = request("terminate", args(ref(child.pid)))["result"]

    assert ended == {"terminated": [child.pid], "refused": []}
    assert child.wait(5) == -signal.SIGTERM  # its owner still reaps it and gets its exit status


def test_terminate_kills_what_ignores_sigterm():
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE)
    try:
        assert stubborn.stdout.readline() == b"ready\n"
        started = time.monotonic()
        result = processes.terminate([ref(stubborn.pid)], grace=0.5)
        assert result.terminated == [stubborn.pid] and result.refused == []
        assert stubborn.wait(5) == -signal.SIGKILL and time.monotonic() - started < 4
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
        stubborn.wait()


def test_terminate_never_signals_this_process_or_its_parents():
    protected = processes._protected()
    assert protected[os.getpid()] == "this kernel" and 1 in protected
    parent = os.getppid()  # 1 where the test runs under a container's init (`docker run … bash scripts/test.sh`)
    if parent == 1:
        assert protected[1] == "init"
    elif parent:  # 0: the parent lies outside this PID namespace
        assert protected[parent].startswith("a parent of this kernel")

    result = processes.terminate([ref(os.getpid())])  # refused before any signal is sent

    assert result.terminated == [] and [(r.pid, r.reason) for r in result.refused] == [(os.getpid(), "this kernel")]


def test_a_kernel_that_is_pid_1_is_this_kernel_not_init(monkeypatch):
    monkeypatch.setattr(processes.os, "getpid", lambda: 1)  # a container whose entry point is the kernel
    assert processes._protected()[1] == "this kernel"


def test_terminate_reports_a_process_that_is_gone():
    gone = subprocess.Popen(["true"])
    gone.wait()
    result = processes.terminate([ProcessRef(gone.pid, 1.0)])
    assert result.terminated == [] and result.refused[0].reason == "not running"


@pytest.mark.parametrize(
    "request_args",
    [
        {},
        {"pids": "1234"},
        {"pids": [{"pid": 1234}]},
        {"pids": [{"pid": -1, "create_time": 1.0}]},
        {"pids": [{"pid": True, "create_time": 1.0}]},
        {"pids": [{"pid": 12, "create_time": "yesterday"}]},
        {"pids": [{"pid": 12, "create_time": 1.0, "signal": 9}]},
        {"pids": [], "force": True},
        {"pids": [{"pid": n, "create_time": 1.0} for n in range(1, 1100)]},
    ],
)
@pytest.mark.parametrize("action", ["processes", "terminate"])
def test_bad_pid_lists_are_a_bad_request(channel_with, action, request_args):
    error = channel_with([])(action, request_args)
    assert (error["type"], error["code"], error["id"]) == ("error", "bad-request", f"r-{action}")
    assert "\n" not in error["message"]


def test_children_takes_no_args(channel_with):
    error = channel_with([])("children", {"recursive": False})
    assert (error["type"], error["code"]) == ("error", "bad-request")


def test_gpu_usage_sums_devices_and_counts_a_mig_slice_once():
    def device(index: int, mig: bool, procs: List[tuple]) -> Dict[str, Any]:
        return {"nvml_index": index, "mig": mig, "processes": [{"pid": p, "used": u} for p, u in procs]}

    sample = {
        "gpu": {
            "available": True,
            "devices": [
                device(0, False, [(10, GiB), (11, None)]),
                device(0, True, [(10, GiB), (12, 3 * GiB)]),  # the parent already listed 10
                device(1, False, [(10, 2 * GiB), (11, GiB)]),
            ],
        }
    }
    assert processes.gpu_usage(sample) == {10: 3 * GiB, 11: GiB, 12: 3 * GiB}
    assert processes.gpu_usage({"gpu": {"available": False, "devices": []}}) is None
    assert processes.gpu_usage(None) is None


@pytest.mark.parametrize(
    "request_args, valid",
    [
        ({"pids": [{"pid": 12, "create_time": 1763855000.25}]}, True),
        ({"pids": []}, True),
        ({"pids": [{"pid": 0, "create_time": 1.0}]}, False),
        ({"pids": [{"pid": 12}]}, False),
        ({}, False),
    ],
)
def test_request_schema_matches_the_parser(request_args, valid):
    for action in ("processes", "terminate"):
        message = {"type": "request", "id": "r-1", "action": action, "args": request_args}
        if valid:
            validate(message)
            parse_process_refs(request_args)
        else:
            with pytest.raises(jsonschema.ValidationError):
                validate(message)
            with pytest.raises(ProtocolError):
                parse_process_refs(request_args)
    validate({"type": "request", "id": "r-2", "action": "children", "args": {}})
    with pytest.raises(jsonschema.ValidationError):
        validate({"type": "request", "id": "r-2", "action": "children", "args": {"x": 1}})


def test_readme_lists_every_action():
    readme = (Path(processes.__file__).parents[1] / "wire" / "schemas" / "README.md").read_text("utf-8")
    assert all(f"- `{action}`" in readme for action in ACTIONS)


def test_latest_sample_is_taken_now_before_the_sampler_has_one(make_prober):
    sampler = Sampler(make_prober([FakeGpu("NVIDIA Test GPU", "GPU-1")]))
    assert sampler.latest()["seq"] == 0 and sampler.history() == []
    sampler.sample_once()
    assert sampler.latest()["seq"] == 1
