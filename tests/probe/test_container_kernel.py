"""A kernel in its own PID namespace, as Docker, Kubernetes, Colab and Kaggle run it: NVML lists host PIDs.

The kernel runs under `unshare --pid --fork --mount-proc` (so its own PID is 1 and nothing of the host is visible
in its /proc); the NVML double inside it lists the host PIDs the test sees. CUDA cannot be initialised here, so a
stand-in `torch.cuda` in that process reports what the sampler reads (initialised, the allocator's reserved
bytes). Every wait polls with a generous timeout: nothing depends on how fast this machine is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import psutil
import pytest

from kernel_harness import KernelHarness
from pid_namespace import WAIT, host_pid_of_kernel, interpreter, poll

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def namespaced_python() -> Iterator[str]:
    yield from interpreter()


GiB = 1024**3
MiB = 1024**2

# Inside the kernel: the NVML double, a stand-in torch.cuda whose state the test sets, and a helper that changes
# both at once under the sampler's probe lock (a sample sees all of a change or none of it).
SETUP = """
import sys as _sys, types as _types
_sys.path.insert(0, "tests")
from fake_nvml import FakeGpu as _FakeGpu, install_in_running_kernel as _install
from gpumem_kernel import extension as _extension
from gpumem_kernel.probe.prober import default_prober as _default_prober

_cuda_state = {"on": False, "reserved": 0}
_cuda = _types.ModuleType("torch.cuda")
_cuda.is_initialized = lambda: _cuda_state["on"]
_cuda.device_count = lambda: 1
_cuda.memory_stats = lambda index: {
    "allocated_bytes.all.current": _cuda_state["reserved"], "reserved_bytes.all.current": _cuda_state["reserved"]
}
_cuda.get_device_properties = lambda index: _types.SimpleNamespace(multi_processor_count=132)
_torch = _types.ModuleType("torch")
_torch.__version__ = "2.13.0+namespace-test"
_torch.cuda = _cuda
_sys.modules["torch"], _sys.modules["torch.cuda"] = _torch, _cuda
_gpu = _FakeGpu("NVIDIA H100 80GB HBM3", "GPU-ns", total=80 * 1024**3, used=40 * 1024**3)


def _set(processes=None, on=None, reserved=None, reset=False):
    lock = _extension.current().sampler._probe_lock
    if reset:
        _install([_gpu])  # a fresh Prober: nothing learned yet
    with lock:
        if processes is not None:
            _gpu.processes = list(processes)
        if on is not None:
            _cuda_state["on"] = on
        if reserved is not None:
            _cuda_state["reserved"] = reserved
    return True
"""

OOM = """
def _oom_check(message):
    from gpumem_kernel.oom.checklist import build_checklist
    from gpumem_kernel.oom.diagnose import diagnose
    from gpumem_kernel.oom.parse import parse_oom_message

    sample = _extension.current().sampler.latest()
    info = parse_oom_message(message)
    d = diagnose(info, sample, None, env={})
    steps = build_checklist(info, d, None, None, sample)
    return {
        "others": sorted(p.pid for p in d.other_processes),
        "mine": sorted(d.this_kernel_pids),
        "children": sorted(p.local_pid or p.pid for p in d.other_processes if p.child_of_kernel),
        "causes": [c.kind for c in d.causes],
        "detail": next(s.detail for s in steps if s.id == "other-processes"),
        "notes": d.notes,
    }
"""


def relations(kernel: KernelHarness) -> Dict[int, Dict[str, Any]]:
    sample = kernel.evaluate("_extension.current().sampler.latest()")
    (device,) = sample["gpu"]["devices"]
    return {p["pid"]: p for p in device["processes"]}


def ticks(kernel: KernelHarness) -> int:
    return kernel.evaluate("_default_prober().hostpids._tick")


def wait_ticks(kernel: KernelHarness, count: int) -> None:
    start = ticks(kernel)
    poll(f"{count} samples", lambda: ticks(kernel) >= start + count)


def wait_relation(kernel: KernelHarness, pid: int, relation: str) -> Dict[str, Any]:
    return poll(
        f"PID {pid} as {relation}",
        lambda: (p := relations(kernel).get(pid)) is not None and p.get("relation") == relation and p,
    )


def set_nvml(kernel: KernelHarness, **change: Any) -> None:
    args = ", ".join(f"{key}={value!r}" for key, value in change.items())
    assert kernel.evaluate(f"_set({args})") is True


@pytest.fixture(scope="module")
def kernels(namespaced_python: str) -> Iterator[List[Any]]:
    """This kernel and a second one, each in its own PID namespace, and an external process on the host."""
    runtime = tempfile.mkdtemp(prefix="gpumem-runtime-")  # the records the kernels write for the server
    first = KernelHarness(python=namespaced_python, extra_env={"JUPYTER_RUNTIME_DIR": runtime}).start(timeout=WAIT)
    second = KernelHarness(python=namespaced_python, extra_env={"JUPYTER_RUNTIME_DIR": runtime}).start(timeout=WAIT)
    external = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(900)"])
    hosts = [host_pid_of_kernel(first), host_pid_of_kernel(second)]
    try:
        assert first.evaluate("__import__('os').getpid()") == 1  # its own PID namespace
        first.bootstrap()
        assert first.execute(SETUP + OOM)["status"] == "ok"
        assert first.evaluate("_set(reset=True)") is True
        yield [first, hosts[0], hosts[1], external.pid]
    finally:
        external.kill()
        external.wait()
        for kernel, host in zip((second, first), reversed(hosts)):
            kernel.stop()
            try:
                psutil.Process(host).kill()  # the namespace's init: its whole namespace ends with it
            except psutil.NoSuchProcess:
                pass


def test_in_a_pid_namespace_this_kernel_its_subprocess_and_the_others_are_told_apart(kernels) -> None:
    kernel, me, second, external = kernels
    assert me != 1 and not psutil.Process(me).cmdline()[0].endswith("unshare")
    before = [(external, 30 * GiB), (second, 3 * GiB)]
    set_nvml(kernel, processes=before, on=False, reserved=0, reset=True)
    wait_ticks(kernel, 2)
    # the user's first CUDA call: the context appears under the kernel's host PID in the same sample
    set_nvml(kernel, processes=before + [(me, 300 * MiB)], on=True)
    probable = wait_relation(kernel, me, "probably_this_kernel")
    assert probable["this_kernel"] is False and probable["local_pid"] == 1
    assert relations(kernel)[external]["relation"] == relations(kernel)[second]["relation"] == "external"
    # the allocator reserves 4 GiB and NVML's figure follows it: confirmed
    mine = (me, 4 * GiB + 300 * MiB)
    set_nvml(kernel, processes=before + [mine], reserved=4 * GiB)
    confirmed = wait_relation(kernel, me, "this_kernel")
    assert confirmed["this_kernel"] is True and "host PID of this kernel" in confirmed["note"]
    sample = kernel.evaluate("_extension.current().sampler.latest()")
    assert sample["kernel"]["gpu_used"] == 4 * GiB + 300 * MiB

    # a subprocess started from a cell (`!python train.py`): its host PID appears when it starts CUDA
    flag = Path(tempfile.mkdtemp(prefix="gpumem-child-")) / "host-pid"
    cell = (
        "import subprocess as _sp, time as _time, pathlib as _pl\n"
        "with _extension.current().sampler._probe_lock:\n"
        "    _child = _sp.Popen([_sys.executable, '-c', 'import time; time.sleep(900)'])\n"
        f"    _flag = _pl.Path({str(flag)!r})\n"
        "    while not _flag.exists() or not _flag.read_text().strip():\n"
        "        _time.sleep(0.05)\n"
        f"    _gpu.processes = {before + [mine]!r} + [(int(_flag.read_text()), 2 * 1024**3)]\n"
    )
    msg_id = kernel.kc.execute(cell)
    child_host = poll("the child on the host", lambda: _sleeper(me))
    flag.write_text(str(child_host))
    kernel.wait_idle(msg_id, WAIT)
    child = wait_relation(kernel, child_host, "notebook")
    local = kernel.evaluate("_child.pid")
    assert child["local_pid"] == local != child_host
    assert "time.sleep(900)" in child["cmdline"]
    (device,) = kernel.evaluate("_extension.current().sampler.latest()")["gpu"]["devices"]
    assert device["notebook_processes"] == 2 * GiB and device["this_kernel"] == 4 * GiB + 300 * MiB
    # what it learned, for the Jupyter server (server/hostpids.py)
    record = Path(kernel.evaluate("str(_default_prober()._record.path)"))
    assert record.parent.name == "gpumem-hostpids" and record.stem == Path(kernel.km.connection_file).stem
    written = poll("the record", lambda: record.exists() and json.loads(record.read_text()))
    assert written["host_pids"] == [me] and written["state"] == "confirmed" and written["pid"] == 1
    assert [(c["pid"], c["host_pid"]) for c in written["children"]] == [(local, child_host)]

    # the OOM checklist: never kill this kernel; the others are the cause; the child is the user's own
    message = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        f"79.19 GiB of which 1.00 GiB is free. Process {me} has 4.29 GiB memory in use. Process {external} has "
        f"30.00 GiB memory in use. Process {second} has 3.00 GiB memory in use. Process {child_host} has 2.00 GiB "
        "memory in use. Of the allocated memory 3.90 GiB is allocated by PyTorch, and 100.00 MiB is reserved by "
        "PyTorch but unallocated."
    )
    oom = kernel.evaluate(f"_oom_check({message!r})")
    assert oom["mine"] == [me] and me not in oom["others"]
    assert sorted(oom["others"]) == sorted([external, second, child_host])
    assert oom["children"] == [local]
    assert oom["causes"][0] == "other-processes"
    assert f"PID {external} (a host PID" in oom["detail"] and "End the ones you own" in oom["detail"]
    assert f"PID {me} (" not in oom["detail"] and f"kill {me}" not in oom["detail"]
    assert f"Started from this notebook: PID {local}" in oom["detail"]

    # End: the kernel proves the process is its own descendant (by its PID in the namespace and start time)
    comm_id = kernel.open_comm({"type": "open", "protocol": 1, "client": "pytest"})
    kernel.wait_comm(comm_id, "hello", timeout=WAIT)
    start = len(kernel.messages())
    ref = {"pid": child["local_pid"], "create_time": child["create_time"]}
    request = {"type": "request", "id": "end-1", "action": "terminate", "args": {"pids": [ref]}}
    kernel.send_comm(comm_id, request)
    reply = kernel.wait_comm(comm_id, "reply", start=start, where=lambda d: d.get("id") == "end-1", timeout=WAIT)
    assert reply["result"]["terminated"] == [local]
    poll("the child to end", lambda: not psutil.pid_exists(child_host) or _zombie(child_host))


def _sleeper(parent: int) -> Optional[int]:
    for child in psutil.Process(parent).children():
        try:
            if "time.sleep(900)" in " ".join(child.cmdline()):
                return child.pid
        except psutil.Error:
            continue
    return None


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_two_kernels_starting_cuda_in_the_same_second_are_ambiguous_and_never_killed(kernels) -> None:
    kernel, me, second, external = kernels
    set_nvml(kernel, processes=[(external, 30 * GiB)], on=False, reserved=0, reset=True)
    wait_ticks(kernel, 2)
    # both kernels create their context between two samples: nothing tells them apart yet
    set_nvml(kernel, processes=[(external, 30 * GiB), (me, 300 * MiB), (second, 300 * MiB)], on=True)
    for pid in (me, second):
        wait_relation(kernel, pid, "ambiguous")
    (device,) = kernel.evaluate("_extension.current().sampler.latest()")["gpu"]["devices"]
    assert device["uncertain"] == 600 * MiB and device["this_kernel"] is None
    note = relations(kernel)[me]["note"]
    assert f"this kernel is one of host PIDs {min(me, second)}, {max(me, second)}" in note

    message = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        f"79.19 GiB of which 1.00 GiB is free. Process {me} has 300.00 MiB memory in use. Process {second} has "
        f"300.00 MiB memory in use. Process {external} has 30.00 GiB memory in use. Of the allocated memory "
        "0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated."
    )
    oom = kernel.evaluate(f"_oom_check({message!r})")
    assert oom["mine"] == sorted([me, second]) and oom["others"] == [external]
    for pid in (me, second):
        assert f"PID {pid} (" not in oom["detail"] and f"kill {pid}" not in oom["detail"]
    assert "never kill it" in oom["detail"]

    # this kernel's allocator grows and only its own host PID follows: the other one is dropped, this one confirmed
    set_nvml(kernel, processes=[(external, 30 * GiB), (me, 3 * GiB + 300 * MiB), (second, 300 * MiB)], reserved=3 * GiB)
    wait_relation(kernel, me, "this_kernel")
    assert relations(kernel)[second]["relation"] == "external"
    assert os.getpid() not in relations(kernel)
