"""A real ipykernel started with jupyter_client, bootstrapped and watched exactly as the browser does."""

from __future__ import annotations


import pytest

from gpumem_kernel.wire.protocol import validate
from kernel_harness import KernelHarness, torch_in_kernel_python

pytestmark = pytest.mark.kernel

INTERVAL = 1.0
BUSY_SECONDS = 8


@pytest.fixture(scope="module")
def kernel():
    with KernelHarness() as harness:
        yield harness


@pytest.fixture(scope="module")
def comm_id(kernel):
    kernel.bootstrap()
    comm = kernel.open_comm({"type": "open", "protocol": 1, "interval": INTERVAL, "client": "pytest"})
    kernel.wait_comm(comm, "hello")
    return comm


def test_bootstrap_loads_the_extension_once_and_reports_the_protocol(kernel):
    first = kernel.bootstrap()
    second = kernel.bootstrap()
    kernel.execute("%load_ext gpumem_kernel")

    assert first == second and first["protocol"] == 1 and first["version"]
    threads = kernel.evaluate("sum(t.name == 'gpumem-sampler' for t in __import__('threading').enumerate())")
    assert threads == 1
    assert kernel.evaluate("'gpumem' in get_ipython().magics_manager.magics['line']") is True


def test_open_gets_hello_then_history_then_samples(kernel, comm_id):
    hello = kernel.wait_comm(comm_id, "hello")
    kernel.wait_comm(comm_id, "sample")
    kinds = [r.comm_data(comm_id)["type"] for r in kernel.comm_messages(comm_id)]

    assert kinds[:2] == ["hello", "history"] and "sample" in kinds[2:]
    assert hello["protocol"] == 1 and hello["interval"] == INTERVAL
    assert hello["pid"] == kernel.evaluate("__import__('os').getpid()")
    print(f"\nkernel ipykernel {hello['ipykernel']}, python {hello['python']}")
    for received in kernel.comm_messages(comm_id)[:3]:
        validate(received.comm_data(comm_id))


def test_samples_keep_arriving_while_a_cell_is_busy(kernel, comm_id):
    reply = kernel.execute(f"import time; time.sleep({BUSY_SECONDS})")
    msg_id = reply["msg_id"]
    messages = kernel.messages()
    started = next(r.at for r in messages if r.msg_type == "execute_input" and r.parent_id == msg_id)
    finished = next(
        r.at
        for r in messages
        if r.msg_type == "status" and r.parent_id == msg_id and r.content["execution_state"] == "idle"
    )
    during = [r for r in kernel.comm_messages(comm_id, "sample") if started <= r.at <= finished]

    expected = int((finished - started) / INTERVAL)
    print(
        f"\nsample delivery during a {BUSY_SECONDS} s busy cell: {len(during)}/{expected} "
        f"(interval {INTERVAL} s, cell took {finished - started:.2f} s)"
    )
    assert len(during) >= 6
    seqs = [r.comm_data(comm_id)["seq"] for r in during]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_snapshot_request_gets_a_reply_with_the_same_id(kernel, comm_id):
    start = len(kernel.messages())
    kernel.send_comm(comm_id, {"type": "request", "id": "r-snap-1", "action": "snapshot", "args": {}})

    reply = kernel.wait_comm(comm_id, "reply", start=start, where=lambda d: d.get("id") == "r-snap-1")

    assert reply["action"] == "snapshot" and reply["result"]["type"] == "sample"
    validate(reply)


def test_a_request_over_a_subshell_is_answered_while_a_cell_is_busy(kernel, comm_id):
    subshell = kernel.create_subshell()
    if subshell is None:
        pytest.skip("the kernel's ipykernel has no subshells (< 7)")
    msg_id = kernel.kc.execute("import time; time.sleep(4)")
    busy = kernel.wait_for(lambda r: r.msg_type == "execute_input" and r.parent_id == msg_id)
    kernel.send_comm(
        comm_id, {"type": "request", "id": "r-busy", "action": "snapshot", "args": {}}, subshell_id=subshell
    )

    reply = kernel.wait_for(lambda r: (r.comm_data(comm_id) or {}).get("id") == "r-busy", timeout=10)
    idle = kernel.wait_idle(msg_id)

    assert busy.at < reply.at < idle.at
    assert reply.comm_data(comm_id)["type"] == "reply"


def test_unknown_action_gets_an_error_with_the_request_id(kernel, comm_id):
    start = len(kernel.messages())
    kernel.send_comm(comm_id, {"type": "request", "id": "r-x", "action": "explode", "args": {}})

    error = kernel.wait_comm(comm_id, "error", start=start)

    assert (error["id"], error["code"]) == ("r-x", "unknown-action")


@pytest.mark.skipif(not torch_in_kernel_python(), reason="torch is not installed for the kernel's Python")
def test_importing_torch_and_sampling_never_initialises_cuda(kernel, comm_id):
    kernel.execute("import torch")
    start = len(kernel.messages())
    kernel.execute("import time; time.sleep(3)")

    samples = [r.comm_data(comm_id) for r in kernel.comm_messages(comm_id, "sample", start=start)]
    assert kernel.evaluate("torch.cuda.is_initialized()") is False
    assert len(samples) >= 2
    assert all(
        s["kernel"]["torch"]
        == {"imported": True, "version": samples[0]["kernel"]["torch"]["version"], "cuda_initialized": False}
        for s in samples
    )
    assert samples[0]["kernel"]["torch"]["version"]
    assert all(d["allocator"] is None for s in samples for d in s["gpu"]["devices"])


def test_an_open_with_an_unknown_protocol_gets_an_error_and_is_closed(kernel):
    kernel.bootstrap()
    hostile = kernel.open_comm({"type": "open", "protocol": 99})

    error = kernel.wait_comm(hostile, "error")
    kernel.wait_comm_closed(hostile)

    assert error["code"] == "bad-request" and "v99" in error["message"]
    assert kernel.comm_messages(hostile, "sample") == []


def test_a_closed_comm_gets_no_more_samples_while_another_keeps_them(kernel, comm_id):
    other = kernel.open_comm({"type": "open", "protocol": 1})
    kernel.wait_comm(other, "sample")
    kernel.close_comm(other)
    kernel.execute("import time; time.sleep(0.2)")  # the close is handled before this runs
    after_close = len(kernel.comm_messages(other, "sample"))
    before = len(kernel.comm_messages(comm_id, "sample"))

    kernel.execute("import time; time.sleep(2.5)")

    assert len(kernel.comm_messages(other, "sample")) == after_close
    assert len(kernel.comm_messages(comm_id, "sample")) >= before + 2


def test_magic_in_the_kernel_shows_a_table(kernel):
    start = len(kernel.messages())
    kernel.execute("%gpumem status")
    outputs = [r.content["data"] for r in kernel.messages()[start:] if r.msg_type == "display_data"]
    assert outputs and "Host" in outputs[0]["text/plain"] and "<table" in outputs[0]["text/html"]

    status = kernel.execute("%gpumem nonsense")
    assert status["status"] == "error" and status["ename"] == "UsageError"
    assert status["evalue"] == (
        "gpumem: unknown command 'nonsense'; try: status, clear, oom, analyze, recommend, autobatch, benchmark, log, "
        "holders, watch"
    )


def test_unload_closes_comms_and_stops_the_sampler_and_bootstrap_brings_it_back(kernel, comm_id):
    kernel.execute("%unload_ext gpumem_kernel")

    kernel.wait_comm_closed(comm_id)
    threads = "sum(t.name == 'gpumem-sampler' for t in __import__('threading').enumerate())"
    assert kernel.evaluate(threads) == 0
    assert kernel.execute("%gpumem status")["ename"] == "UsageError"  # magic gone

    kernel.bootstrap()
    assert kernel.evaluate(threads) == 1
    fresh = kernel.open_comm({"type": "open", "protocol": 1})
    assert kernel.wait_comm(fresh, "hello")["protocol"] == 1
