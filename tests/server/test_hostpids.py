"""In a container the server maps NVML's host PIDs to its kernels by what each kernel learned and wrote
(probe/hostpidrecord.py → server/hostpids.py): notebook labels, idle holders and /metrics work there too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Tuple

import psutil
import pytest
from prometheus_client import CollectorRegistry

from fake_nvml import FakeGpu, FakeNvml, GiB
from gpumem_kernel.probe.hostpid import Learned
from gpumem_kernel.probe.hostpidrecord import HostPidRecord
from gpumem_kernel.probe.nvml import Nvml
from gpumem_kernel.probe.prober import Prober
from gpumem_kernel.server.hostpids import HostPidRecords
from gpumem_kernel.server.metrics import GpuMemCollector
from gpumem_kernel.server.machine import MachineReader
from test_machine import NOW, UUID0, FakeKernelManager, FakeSessions, parse

HOST_KERNEL, HOST_CHILD, HOST_OUTSIDER = 4_000_000, 4_000_200, 3_900_000


@pytest.fixture
def kernel_process() -> Iterator[Tuple[int, float]]:
    """A real process standing for a kernel the server runs: its PID and start time."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield process.pid, psutil.Process(process.pid).create_time()
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "gpumem-hostpids"
    path.mkdir(mode=0o700)
    return path


def write_record(folder: Path, kernel_id: str, pid: int, created: float, state: str = "confirmed") -> HostPidRecord:
    record = HostPidRecord(folder / f"kernel-{kernel_id}.json", pid, created, kernel_id)
    assert record.write(Learned((HOST_KERNEL,), state, ((88, created + 5, HOST_CHILD),)))
    return record


def watch_with(folder: Path, km: FakeKernelManager) -> MachineReader:
    gpu = FakeGpu(
        "H100", UUID0, total=80 * GiB, processes=[(HOST_KERNEL, 2 * GiB), (HOST_CHILD, GiB), (HOST_OUTSIDER, 5 * GiB)]
    )
    prober = Prober(nvml=Nvml(FakeNvml([gpu])), env={})
    return MachineReader(
        km, FakeSessions([("k-ns", "train.ipynb")]), prober=prober, clock=lambda: NOW, hostpids=HostPidRecords(folder)
    )


def test_the_kernels_record_maps_its_host_pids_to_its_notebook(folder, kernel_process):
    pid, created = kernel_process
    write_record(folder, "k-ns", pid, created)
    km = FakeKernelManager()
    km.add("k-ns", pid, idle=3600)
    view = watch_with(folder, km).view()

    owners = {p.pid: (p.kernel_id, p.path) for p in view.processes}
    assert owners[HOST_KERNEL] == owners[HOST_CHILD] == ("k-ns", "train.ipynb")
    assert owners[HOST_OUTSIDER] == (None, "")
    (kernel,) = view.kernels
    assert kernel.gpu_bytes == 3 * GiB
    assert [k.facts.kernel_id for k in view.idle_holders(1800)] == ["k-ns"]

    registry = CollectorRegistry()
    registry.register(GpuMemCollector(lambda: view, lambda: 1800.0))
    labels = {s[0]["pid"]: s[0]["notebook_path"] for s in parse(registry)["gpumem_process_gpu_memory_bytes"]}
    assert labels[str(HOST_KERNEL)] == "train.ipynb" and labels[str(HOST_OUTSIDER)] == ""


def test_stale_foreign_and_unconfirmed_records_are_ignored(folder, kernel_process):
    pid, created = kernel_process
    km = FakeKernelManager()
    km.add("k-ns", pid)
    km.add("k-remote", None)  # not run by this server: no process proves whose record it is
    write_record(folder, "k-remote", pid, created)
    write_record(folder, "k-ns", pid, created - 30)  # an earlier run of the kernel (another start time)
    view = watch_with(folder, km).view()
    assert {p.pid: p.kernel_id for p in view.processes}[HOST_KERNEL] is None

    write_record(folder, "k-ns", pid, created, state="probable")  # not a fact yet: only its child is named
    view = watch_with(folder, km).view()
    owners = {p.pid: p.kernel_id for p in view.processes}
    assert owners[HOST_KERNEL] is None and owners[HOST_CHILD] == "k-ns"

    write_record(folder, "k-ns", pid, created)
    (folder / "kernel-k-ns.json").chmod(0o666)  # anyone could have written it
    records = HostPidRecords(folder)
    facts = [k.facts for k in watch_with(folder, km).view().kernels]
    assert records.owners(facts) == {}


def test_a_record_is_parsed_again_only_when_its_file_changes(folder, kernel_process, monkeypatch):
    pid, created = kernel_process
    record = write_record(folder, "k-ns", pid, created)
    km = FakeKernelManager()
    km.add("k-ns", pid)
    facts = [k.facts for k in watch_with(folder, km).view().kernels]
    records = HostPidRecords(folder)
    parsed = []
    real = json.loads
    monkeypatch.setattr("gpumem_kernel.server.hostpids.json.loads", lambda text: parsed.append(1) or real(text))
    assert records.owners(facts) == {HOST_KERNEL: "k-ns", HOST_CHILD: "k-ns"}
    assert records.owners(facts) == {HOST_KERNEL: "k-ns", HOST_CHILD: "k-ns"}
    assert len(parsed) == 1
    # the kernel learns no more children: its file changes, and the server reads it again
    assert not record.write(Learned((HOST_KERNEL,), "confirmed", ((88, created + 5, HOST_CHILD),)))  # unchanged
    time.sleep(0.01)
    assert record.write(Learned((HOST_KERNEL,), "confirmed", ()))
    os.utime(folder / "kernel-k-ns.json", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert records.owners(facts) == {HOST_KERNEL: "k-ns"}
    assert len(parsed) == 2


def test_the_record_is_private_and_replaced_whole(folder, kernel_process):
    pid, created = kernel_process
    write_record(folder, "k-ns", pid, created)
    path = folder / "kernel-k-ns.json"
    data = json.loads(path.read_text())
    assert data["host_pids"] == [HOST_KERNEL] and data["children"][0]["host_pid"] == HOST_CHILD
    assert data["kernel_id"] == "k-ns" and data["pid"] == pid
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in folder.iterdir()] == ["kernel-k-ns.json"]  # no temporary file left
