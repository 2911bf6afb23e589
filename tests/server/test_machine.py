"""The server's view of the machine, in process: GPU processes mapped to kernels through their ancestry, the 1 s
cache, the collector with and without NVML, and what the server side imports."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace
from typing import Iterator, List, Optional

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conftest import KERNEL_PYTHON
from fake_nvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml, GiB
from gpumem_kernel.probe.nvml import Nvml
from gpumem_kernel.probe.prober import Prober
from gpumem_kernel.server.activity import Executions
from gpumem_kernel.server.handlers import kernels_payload
from gpumem_kernel.server.kernels import KernelFacts
from gpumem_kernel.server.metrics import GpuMemCollector
from gpumem_kernel.server.machine import MachineReader

UUID0 = "GPU-8f3a1111-2222-3333-4444-555555555555"
NOW = 1_800_000_000.0


class FakeKernelManager:
    """What the watch reads of jupyter_server's MappingKernelManager."""

    def __init__(self) -> None:
        self.kernels = {}

    def add(self, kernel_id: str, pid: Optional[int], state: str = "idle", idle: float = 0.0) -> None:
        last = dt.datetime.fromtimestamp(NOW - idle, tz=dt.timezone.utc)
        provisioner = SimpleNamespace(process=SimpleNamespace(pid=pid)) if pid is not None else None
        self.kernels[kernel_id] = SimpleNamespace(
            kernel_name="python3", provisioner=provisioner, execution_state=state, last_activity=last
        )

    def list_kernel_ids(self) -> List[str]:
        return list(self.kernels)

    def get_kernel(self, kernel_id: str):
        return self.kernels[kernel_id]


class FakeSessions:
    def __init__(self, rows) -> None:
        self.cursor = SimpleNamespace(execute=lambda sql: SimpleNamespace(fetchall=lambda: rows))


@pytest.fixture
def kernel_with_a_worker() -> Iterator[tuple]:
    """A real process (the "kernel") that started a child (its "DataLoader worker", with its own command line)."""
    sleep = "import time; time.sleep(60)"
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleep!r}]); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    children: List[psutil.Process] = []
    while not children and time.monotonic() < deadline:
        children = psutil.Process(parent.pid).children()
        time.sleep(0.05)
    assert children, "the child did not start"
    yield parent.pid, children[0].pid
    for child in children:
        child.kill()
    parent.kill()
    parent.wait()


def watch_over(gpus: List[FakeGpu], km: FakeKernelManager, sessions=None, init_error=None, clock=lambda: NOW):
    fake = FakeNvml(gpus, init_error=init_error)
    return MachineReader(km, sessions, prober=Prober(nvml=Nvml(fake), env={}), clock=clock), fake


def test_a_worker_process_counts_for_the_kernel_that_started_it(kernel_with_a_worker):
    kernel_pid, worker_pid = kernel_with_a_worker
    km = FakeKernelManager()
    km.add("k-train", kernel_pid, idle=3600)
    km.add("k-other", None, idle=10)  # e.g. a remote kernel: no local process
    gpus = [FakeGpu("RTX", UUID0, processes=[(kernel_pid, 2 * GiB), (worker_pid, 1 * GiB), (1, 512)])]
    watch, _ = watch_over(gpus, km, FakeSessions([("k-train", "train.ipynb")]))

    view = watch.view()

    owners = {p.pid: (p.kernel_id, p.path) for p in view.processes}
    assert owners[kernel_pid] == ("k-train", "train.ipynb")
    assert owners[worker_pid] == ("k-train", "train.ipynb")
    assert owners[1] == (None, "")  # init: on no kernel's behalf
    by_id = {k.facts.kernel_id: k for k in view.kernels}
    assert by_id["k-train"].gpu_bytes == 3 * GiB and by_id["k-other"].gpu_bytes == 0
    assert by_id["k-train"].idle_seconds == pytest.approx(3600)
    assert [k.facts.kernel_id for k in view.idle_holders(1800)] == ["k-train"]
    assert view.idle_holders(7200) == []


def test_a_kernel_id_in_the_command_line_counts_only_when_it_is_this_servers(tmp_path):
    km = FakeKernelManager()
    km.add("ours", None)
    started = [
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", "-f", str(tmp_path / f"kernel-{k}.json")]
        )
        for k in ("ours", "another-servers")
    ]
    try:
        for p in started:  # wait for the final command line (after exec)
            while str(tmp_path) not in " ".join(psutil.Process(p.pid).cmdline()):
                time.sleep(0.01)
        watch, _ = watch_over([FakeGpu("RTX", UUID0, processes=[(p.pid, GiB) for p in started])], km)
        owners = {p.pid: p.kernel_id for p in watch.view().processes}
    finally:
        for p in started:
            p.kill()
            p.wait()
    assert owners == {started[0].pid: "ours", started[1].pid: None}


def test_busy_and_starting_kernels_are_not_idle():
    assert KernelFacts("a", "python3", "", None, "busy", NOW - 99).idle_seconds(NOW) == 0
    assert KernelFacts("a", "python3", "", None, "starting", NOW - 99).idle_seconds(NOW) == 0
    assert KernelFacts("a", "python3", "", None, "idle", NOW - 99).idle_seconds(NOW) == 99
    assert KernelFacts("a", "python3", "", None, "idle", None).idle_seconds(NOW) == 0


def test_with_its_executions_watched_a_kernel_is_idle_since_its_last_cell_whatever_its_comms_do():
    def facts(state: str, executions: Executions) -> KernelFacts:
        return KernelFacts("a", "python3", "", None, state, NOW - 1, executions)

    assert facts("idle", Executions(since=NOW - 600)).idle_seconds(NOW) == 600  # no cell since it started
    assert facts("idle", Executions(since=NOW - 600, last=NOW - 60)).idle_seconds(NOW) == 60
    assert facts("busy", Executions(since=NOW - 600, last=NOW - 60)).idle_seconds(NOW) == 60  # a comm message
    assert facts("busy", Executions(since=NOW - 600, last=NOW - 60, running=True)).idle_seconds(NOW) == 0
    assert facts("restarting", Executions(since=NOW - 600)).idle_seconds(NOW) == 0


def test_one_read_serves_every_ask_for_one_second():
    now = [NOW]
    km = FakeKernelManager()
    watch, fake = watch_over([FakeGpu("RTX", UUID0)], km, clock=lambda: now[0])
    first = watch.view()
    now[0] += 0.5
    assert watch.view() is first
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 1
    now[0] += 0.6
    assert watch.view() is not first
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 2


def parse(registry: CollectorRegistry) -> dict:
    found: dict = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            found.setdefault(s.name, []).append((s.labels, s.value))
    return found


def test_without_nvml_the_collector_gives_the_kernels_and_a_zero_gauge():
    km = FakeKernelManager()
    km.add("k1", None, idle=120)
    watch, _ = watch_over([], km, init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    registry = CollectorRegistry()
    registry.register(GpuMemCollector(watch.view, lambda: 60.0))
    found = parse(registry)
    assert found["gpumem_nvml_available"] == [({}, 0.0)]
    assert "gpumem_gpu_memory_used_bytes" not in found
    assert found["gpumem_kernel_idle_seconds"] == [
        ({"kernel_id": "k1", "kernel_name": "python3", "notebook_path": ""}, 120.0)
    ]
    assert found["gpumem_idle_gpu_holders"] == [({}, 0.0)]  # idle, but holds no GPU memory
    assert kernels_payload(watch.view(), 1.0)["reason"] == "NVIDIA driver library (libnvidia-ml.so.1) not found"


def test_a_failing_read_still_answers_the_scrape():
    def broken():
        raise RuntimeError("kernel manager gone")

    registry = CollectorRegistry()
    registry.register(GpuMemCollector(broken, lambda: 60.0))
    assert parse(registry)["gpumem_nvml_available"] == [({}, 0.0)]


_IMPORTS = """
import json, sys
from types import SimpleNamespace
from prometheus_client import CollectorRegistry, generate_latest
import gpumem_kernel.server
from gpumem_kernel.server.metrics import GpuMemCollector
from gpumem_kernel.server.machine import MachineReader
km = SimpleNamespace(list_kernel_ids=lambda: [], get_kernel=lambda k: None)
registry = CollectorRegistry()
registry.register(GpuMemCollector(MachineReader(km).view, lambda: 1800.0))
text = generate_latest(registry).decode()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {"IPython", "ipykernel", "torch", "comm"})
print(json.dumps({"heavy": heavy, "ok": "gpumem_nvml_available" in text}))
"""


def test_the_server_side_imports_neither_ipython_nor_torch():
    # The real NVML path (here: absent; on a GPU machine: the driver) in a fresh interpreter.
    out = subprocess.run([sys.executable, "-c", _IMPORTS], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"heavy": [], "ok": True}


_REAL_GPU = """
import json, os, subprocess, sys, time
from types import SimpleNamespace
from gpumem_kernel.server.machine import MachineReader
holder = subprocess.Popen([holder_python, "-c", textwrap_code])
km = SimpleNamespace(list_kernel_ids=lambda: ["k"], get_kernel=lambda k: SimpleNamespace(
    kernel_name="python3", provisioner=SimpleNamespace(process=holder), execution_state="idle", last_activity=None))
watch = MachineReader(km, max_age=0)
try:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        view = watch.view()
        if any(p.pid == holder.pid for p in view.processes):
            break
        time.sleep(0.5)
    started = time.perf_counter()
    view = watch.view()
    took = time.perf_counter() - started
finally:
    holder.kill()
print(json.dumps({
    "available": view.nvml_available, "gpus": [[g.total, g.used] for g in view.gpus],
    "kernel_bytes": view.kernels[0].gpu_bytes, "mine": [p.pid for p in view.processes if p.pid == os.getpid()],
    "torch": "torch" in sys.modules, "took": took,
}))
"""


@pytest.mark.gpu
def test_real_nvml_sees_a_kernel_holding_gpu_memory_and_creates_no_context_itself():
    holder = "import time, torch; x = torch.ones(2**26, device='cuda'); time.sleep(120)"
    # the holder in the kernels' Python (a CUDA build of torch); the watch in this one (jupyter_server's)
    code = _REAL_GPU.replace("textwrap_code", repr(textwrap.dedent(holder))).replace(
        "holder_python", repr(KERNEL_PYTHON)
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(result)
    assert result["available"] is True and result["gpus"]
    assert all(total > 0 and 0 <= used <= total for total, used in result["gpus"])
    assert result["kernel_bytes"] > 2**28  # the tensor (256 MiB) and the holder's CUDA context
    assert result["mine"] == [] and result["torch"] is False  # the server side never opened a CUDA context
    assert result["took"] < 0.5


def test_the_server_side_builds_only_on_the_measuring_layers():
    """No import of the kernel-only folders (channel, magics, extension need IPython / a comm)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("check_imports", root / "scripts" / "check_imports.py")
    checker = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("check_imports", checker)
    spec.loader.exec_module(sys.modules["check_imports"])
    folders = sys.modules["check_imports"].folder_graph(sys.modules["check_imports"].build_graph(root))
    # The server reads the machine (probe, wire) and builds the OOM killer's host checklist with the one
    # checklist builder (oom, which formats with render); nothing below it needs a kernel.
    reached, pending = set(), ["server"]
    while pending:
        for folder in folders.get(pending.pop(), set()) - reached:
            reached.add(folder)
            pending.append(folder)
    assert folders["server"] <= {"probe", "wire", "oom", "render"}, folders["server"]
    assert not reached & {"channel", "magics", "extension"}, reached
