"""What a `terminate` from the browser may end: this kernel's descendants, and the orphaned children of its
predecessor in the same notebook. Everything else is refused with a reason, in a real kernel."""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
import time
from typing import Any, Dict, Iterator, List

import psutil
import pytest

from gpumem_kernel.probe.lineage import Lineage, Run
from kernel_harness import KernelHarness

pytestmark = pytest.mark.kernel

# Its own session: it outlives the kernel, like a stuck DataLoader worker.
SPAWN_ORPHAN = "import subprocess as _sp\n_orphan = _sp.Popen(['sleep', '300'], start_new_session=True)"


def ref(pid: int) -> Dict[str, Any]:
    return {"pid": pid, "create_time": psutil.Process(pid).create_time()}


def ask(kernel: KernelHarness, comm_id: str, action: str, pids: List[Dict[str, Any]]) -> Dict[str, Any]:
    request_id = f"r-{time.monotonic_ns()}"
    start = len(kernel.messages())
    kernel.send_comm(comm_id, {"type": "request", "id": request_id, "action": action, "args": {"pids": pids}})
    reply = kernel.wait_comm(comm_id, "reply", start=start, where=lambda d: d.get("id") == request_id, timeout=30)
    return reply["result"]


def connect(kernel: KernelHarness) -> str:
    kernel.bootstrap()
    comm_id = kernel.open_comm({"type": "open", "protocol": 1, "client": "pytest"})
    kernel.wait_comm(comm_id, "hello")
    return comm_id


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def reasons(result: Dict[str, Any]) -> Dict[int, str]:
    return {r["pid"]: r["reason"] for r in result["refused"]}


@pytest.fixture(scope="module")
def runtime_dir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="gpumem-runtime-") as path:
        yield path


@pytest.fixture(scope="module")
def kernel(runtime_dir) -> Iterator[KernelHarness]:
    with KernelHarness(extra_env={"JUPYTER_RUNTIME_DIR": runtime_dir}) as harness:
        yield harness


@pytest.fixture
def stray() -> Iterator[subprocess.Popen]:
    """A process this test started: not the kernel's, whatever the browser says."""
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def test_refuses_a_process_started_by_someone_else(kernel, stray):
    result = ask(kernel, connect(kernel), "terminate", [ref(stray.pid)])
    assert result["terminated"] == []
    assert reasons(result) == {stray.pid: "not a process of this kernel or of its predecessor in this notebook"}
    assert stray.poll() is None  # still running


def test_refuses_init(kernel):
    result = ask(kernel, connect(kernel), "terminate", [ref(1)])
    assert reasons(result) == {1: "init"}


def _nobody_exists() -> bool:
    try:
        pwd.getpwnam("nobody")
    except KeyError:  # a minimal image's /etc/passwd may hold root alone
        return False
    return True


@pytest.mark.skipif(os.geteuid() != 0, reason="starting another user's process needs root")
@pytest.mark.skipif(not _nobody_exists(), reason="this machine has no user 'nobody' to start a process as")
def test_refuses_another_users_process_even_to_root(kernel):
    other = subprocess.Popen(["sleep", "300"], user="nobody", start_new_session=True)
    try:
        result = ask(kernel, connect(kernel), "terminate", [ref(other.pid)])
        assert reasons(result) == {other.pid: f"another user's process (uid {psutil.Process(other.pid).uids().real})"}
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_refuses_another_kernel(kernel, runtime_dir):
    with KernelHarness(extra_env={"JUPYTER_RUNTIME_DIR": runtime_dir}) as other:
        connect(other)
        pid = other.evaluate("__import__('os').getpid()")
        result = ask(kernel, connect(kernel), "terminate", [ref(pid)])
        assert reasons(result) == {pid: "not a process of this kernel or of its predecessor in this notebook"}
        assert other.evaluate("1 + 1") == 2  # alive and well


def test_ends_its_own_child_and_the_orphan_of_its_predecessor(kernel, stray):
    comm_id = connect(kernel)
    assert kernel.execute(SPAWN_ORPHAN)["status"] == "ok"
    orphan = kernel.evaluate("_orphan.pid")
    # The browser learns the kernel's children from `children`, which is also what the kernel records.
    start = len(kernel.messages())
    kernel.send_comm(comm_id, {"type": "request", "id": "c-1", "action": "children", "args": {}})
    listed = kernel.wait_comm(comm_id, "reply", start=start, where=lambda d: d.get("id") == "c-1")["result"]
    assert orphan in [c["pid"] for c in listed["children"]]
    orphan_ref = ref(orphan)

    kernel.restart()  # what Kernel > Restart does: same kernel id, a new process
    assert psutil.pid_exists(orphan)  # the old kernel is gone, its worker is not
    comm_id = connect(kernel)

    result = ask(kernel, comm_id, "terminate", [orphan_ref, ref(stray.pid)])
    assert result["terminated"] == [orphan] and _zombie(orphan)
    assert list(reasons(result)) == [stray.pid]
    mine = kernel.evaluate("__import__('subprocess').Popen(['sleep', '300']).pid")
    assert ask(kernel, comm_id, "terminate", [ref(mine)]) == {"terminated": [mine], "refused": []}


def test_a_record_of_another_user_or_writable_by_others_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setattr("gpumem_kernel.probe.lineage.connection_file", lambda: "/x/kernel-abc.json")
    monkeypatch.setattr("gpumem_kernel.probe.lineage.record_dir", lambda: tmp_path / "rec")
    first = Lineage.for_this_kernel(111, 1.0)
    first.note_children([(222, 2.0)])
    second = Lineage.for_this_kernel(333, 3.0)
    assert [(r.pid, r.children) for r in second.predecessors] == [(111, {(222, 2.0)})]
    assert second.predecessor_of(222, 2.0, 0.01) is not None
    (tmp_path / "rec" / "kernel-abc.json").chmod(0o666)  # anyone could have written it
    assert Lineage.for_this_kernel(444, 4.0).predecessors == []
    assert Run.from_json({"pid": "x"}) is None
