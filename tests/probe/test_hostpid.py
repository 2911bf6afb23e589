"""Matching NVML's host PIDs to this kernel and its notebook's processes (probe/hostpid.py), sample by sample."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, Iterable, List, Mapping, Optional

import pytest

from fake_nvml import FakeGpu, GiB
from gpumem_kernel.probe.hostpid import (
    AMBIGUOUS,
    NOTEBOOK,
    PROBABLY_THIS_KERNEL,
    THIS_KERNEL,
    DeviceView,
    HostPids,
    Identity,
    LocalView,
    Relation,
)
from gpumem_kernel.wire.protocol import validate

MiB = 1024**2
ME = 57  # this kernel's PID in its namespace
HOST_ME, HOST_OTHER, HOST_CHILD, EXTERNAL = 4_000_000, 4_000_100, 4_000_200, 3_900_000


class FakeView:
    """What the namespace sees: `local` PIDs exist here; `cuda` says who has /dev/nvidia-uvm open."""

    def __init__(self, local: Iterable[int] = (), cuda: Optional[Dict[int, Optional[bool]]] = None) -> None:
        self.local = set(local)
        self.cuda: Dict[int, Optional[bool]] = cuda or {}

    def plausible(self, pid: int) -> bool:
        return pid in self.local

    def uses_cuda(self, pid: int) -> Optional[bool]:
        return self.cuda.get(pid)

    def identity(self, pid: int) -> Optional[Identity]:
        return Identity(1000.0 + pid, f"python train.py --pid {pid}")


def device(reserved: Optional[int], used_by: Mapping[int, Optional[int]], key: str = "0") -> List[DeviceView]:
    return [DeviceView(key, reserved, dict(used_by))]


def kinds(relations: Mapping[int, Relation]) -> Dict[int, str]:
    return {pid: r.relation for pid, r in relations.items()}


@pytest.fixture
def matcher() -> HostPids:
    return HostPids(ME, FakeView(local={ME}))


def test_the_kernels_own_pid_listed_as_it_is_changes_nothing(matcher):
    relations = matcher.update(device(GiB, {ME: GiB + 300 * MiB, EXTERNAL: GiB}), True, [])
    assert kinds(relations) == {ME: THIS_KERNEL}
    assert relations[ME].note is None
    assert matcher.learned().kernel_state == "direct"


def test_a_host_pid_appearing_when_cuda_starts_is_probable_then_confirmed_by_tracking(matcher):
    assert matcher.update(device(None, {EXTERNAL: 5 * GiB}), False, []) == {}
    relations = matcher.update(device(0, {EXTERNAL: 5 * GiB, HOST_ME: 300 * MiB}), True, [])
    assert kinds(relations) == {HOST_ME: PROBABLY_THIS_KERNEL}
    assert "probably this kernel (host PID 4000000)" in (relations[HOST_ME].note or "")
    relations = matcher.update(device(2 * GiB, {EXTERNAL: 5 * GiB, HOST_ME: 2 * GiB + 310 * MiB}), True, [])
    assert kinds(relations) == {HOST_ME: THIS_KERNEL}
    assert relations[HOST_ME].local_pid == ME
    assert matcher.learned().kernel_state == "confirmed"
    assert matcher.learned().kernel_host_pids == (HOST_ME,)


def test_a_candidate_whose_figure_does_not_follow_reserved_is_dropped(matcher):
    matcher.update(device(None, {}), False, [])
    assert kinds(matcher.update(device(0, {HOST_OTHER: 300 * MiB}), True, [])) == {HOST_OTHER: PROBABLY_THIS_KERNEL}
    # reserved grows, its figure does not: one miss may be NVML and torch read at different moments, two drop it
    assert kinds(matcher.update(device(3 * GiB, {HOST_OTHER: 300 * MiB}), True, [])) == {
        HOST_OTHER: PROBABLY_THIS_KERNEL
    }
    assert matcher.update(device(3 * GiB, {HOST_OTHER: 300 * MiB}), True, []) == {}
    assert matcher.learned().kernel_state == "unknown"


def test_two_kernels_starting_cuda_in_the_same_second_are_ambiguous_until_tracking_tells_them_apart(matcher):
    matcher.update(device(None, {}), False, [])
    both = {HOST_ME: 300 * MiB, HOST_OTHER: 300 * MiB}
    relations = matcher.update(device(0, both), True, [])
    assert kinds(relations) == {HOST_ME: AMBIGUOUS, HOST_OTHER: AMBIGUOUS}
    assert relations[HOST_ME].note == "this kernel is one of host PIDs 4000000, 4000100 (they cannot be told apart yet)"
    # both follow this kernel's reserved memory exactly: still ambiguous, never a guess
    same = {HOST_ME: GiB + 300 * MiB, HOST_OTHER: GiB + 300 * MiB}
    assert set(kinds(matcher.update(device(GiB, same), True, [])).values()) == {AMBIGUOUS}
    assert matcher.learned().kernel_state == "ambiguous"
    # the other kernel stops following: two misses drop it, and this kernel is the one left
    apart = {HOST_ME: 3 * GiB + 300 * MiB, HOST_OTHER: GiB + 300 * MiB}
    matcher.update(device(3 * GiB, apart), True, [])
    assert kinds(matcher.update(device(3 * GiB, apart), True, [])) == {HOST_ME: THIS_KERNEL}


def test_pids_listed_before_the_first_sample_or_visible_here_are_no_candidates():
    matcher = HostPids(ME, FakeView(local={ME, 812}))
    matcher.update(device(None, {HOST_OTHER: GiB}), False, [])
    assert matcher.update(device(0, {HOST_OTHER: GiB, 812: 300 * MiB}), True, []) == {}


def test_without_a_window_tracking_alone_decides_among_the_pids_that_fit(matcher):
    # CUDA was initialised before the first sample: no window; the 10 GiB process cannot be reserved + context
    first = matcher.update(device(2 * GiB, {HOST_ME: 2 * GiB + 400 * MiB, HOST_OTHER: 10 * GiB}), True, [])
    assert kinds(first) == {HOST_ME: PROBABLY_THIS_KERNEL}
    assert "fits this kernel's reserved memory" in (first[HOST_ME].note or "")
    confirmed = matcher.update(device(4 * GiB, {HOST_ME: 4 * GiB + 400 * MiB, HOST_OTHER: 10 * GiB}), True, [])
    assert kinds(confirmed) == {HOST_ME: THIS_KERNEL}


def test_a_kernel_holding_memory_must_be_listed_on_that_device():
    matcher = HostPids(ME, FakeView(local={ME}))
    matcher.update(device(None, {}), False, [])
    matcher.update([DeviceView("0", 0, {HOST_ME: 300 * MiB}), DeviceView("1", 0, {})], True, [])
    lost = [DeviceView("0", 0, {HOST_ME: 300 * MiB}), DeviceView("1", 2 * GiB, {})]
    matcher.update(lost, True, [])
    assert matcher.update(lost, True, []) == {}


def test_a_descendant_listed_as_it_is_is_the_notebooks_with_its_command_line(matcher):
    relations = matcher.update(device(None, {4321: GiB}), False, [4321])
    assert kinds(relations) == {4321: NOTEBOOK}
    assert relations[4321].cmdline == "python train.py --pid 4321"
    assert (relations[4321].local_pid, relations[4321].create_time, relations[4321].note) == (4321, 5321.0, None)


def test_in_a_container_a_descendant_starting_cuda_is_matched_to_the_host_pid_that_appears():
    view = FakeView(local={ME, 88}, cuda={88: False})
    matcher = HostPids(ME, view)
    matcher.update(device(None, {EXTERNAL: GiB}), False, [88])
    view.cuda[88] = True  # it opened /dev/nvidia-uvm
    relations = matcher.update(device(None, {EXTERNAL: GiB, HOST_CHILD: 700 * MiB}), False, [88])
    assert kinds(relations) == {HOST_CHILD: NOTEBOOK}
    assert relations[HOST_CHILD].local_pid == 88
    assert "process 88 started from this notebook" in (relations[HOST_CHILD].note or "")
    assert matcher.learned().children == ((88, 1088.0, HOST_CHILD),)


def test_a_descendant_that_has_not_started_cuda_takes_no_host_pid():
    view = FakeView(local={ME, 88}, cuda={88: False})
    matcher = HostPids(ME, view)
    matcher.update(device(None, {}), False, [88])
    assert matcher.update(device(None, {HOST_OTHER: 700 * MiB}), False, [88]) == {}


def test_two_descendants_starting_cuda_together_are_not_guessed():
    view = FakeView(local={ME, 88, 89}, cuda={88: False, 89: False})
    matcher = HostPids(ME, view)
    matcher.update(device(None, {}), False, [88, 89])
    view.cuda.update({88: True, 89: True})
    assert matcher.update(device(None, {HOST_CHILD: GiB, HOST_OTHER: GiB}), False, [88, 89]) == {}


def test_a_reused_host_pid_is_not_the_notebooks_after_its_process_ended():
    view = FakeView(local={ME, 88}, cuda={88: False})
    matcher = HostPids(ME, view)
    matcher.update(device(None, {}), False, [88])
    view.cuda[88] = True
    assert kinds(matcher.update(device(None, {HOST_CHILD: GiB}), False, [88])) == {HOST_CHILD: NOTEBOOK}
    # the child ends and NVML stops listing it; later another process gets the same host PID
    matcher.update(device(None, {}), False, [])
    assert matcher.update(device(None, {HOST_CHILD: GiB}), False, []) == {}
    assert matcher.learned().children == ()


def test_a_reused_pid_of_a_dropped_candidate_is_a_new_process(matcher):
    matcher.update(device(None, {}), False, [])
    matcher.update(device(0, {HOST_OTHER: 300 * MiB}), True, [])
    for _ in range(2):
        matcher.update(device(3 * GiB, {HOST_OTHER: 300 * MiB}), True, [])
    matcher.update(device(3 * GiB, {}), True, [])  # gone
    # a new process with that host PID that fits this kernel (no window any more: tracking alone)
    relations = matcher.update(device(3 * GiB, {HOST_OTHER: 3 * GiB + 300 * MiB}), True, [])
    assert kinds(relations) == {HOST_OTHER: PROBABLY_THIS_KERNEL}


def test_the_local_view_reads_this_process_and_its_child():
    view = LocalView()
    # The child says when its start-up is over: until then Python opens and closes files, and a descriptor
    # listed in /proc can be gone before it is read.
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        nvidia = [os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{child.pid}/fd")]
        # no NVIDIA device open: a host PID NVML lists with that number would be another process
        assert view.plausible(child.pid) is any(path.startswith("/dev/nvidia") for path in nvidia)
        identity = view.identity(child.pid)
        assert identity is not None and "time.sleep(30)" in (identity.cmdline or "")
        assert view.uses_cuda(child.pid) in (None, False)
        assert view.plausible(2**22 + 12345) is False
    finally:
        child.kill()
        child.wait()


def _fake_torch(monkeypatch, reserved: Dict[int, int]):
    import types

    cuda = types.ModuleType("torch.cuda")
    cuda.is_initialized = lambda: bool(reserved)
    cuda.device_count = lambda: 1
    keys = ("allocated_bytes.all.current", "reserved_bytes.all.current")
    cuda.memory_stats = lambda index: {key: reserved.get(index, 0) for key in keys}
    cuda.get_device_properties = lambda index: types.SimpleNamespace(multi_processor_count=80)
    torch = types.ModuleType("torch")
    torch.__version__ = "2.13.0+fake"
    torch.cuda = cuda
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.cuda", cuda)


def test_the_prober_labels_processes_and_sums_the_devices_figures(make_prober, monkeypatch):
    reserved: Dict[int, int] = {}
    _fake_torch(monkeypatch, reserved)
    gpu = FakeGpu("NVIDIA H100", "GPU-1", total=80 * GiB, used=10 * GiB, processes=[(EXTERNAL, 5 * GiB)])
    prober = make_prober([gpu], pid=ME)
    prober.hostpids.view = FakeView(local={ME})
    prober._descendants = lambda pid: []
    prober()
    reserved[0] = 2 * GiB
    gpu.processes = [(EXTERNAL, 5 * GiB), (HOST_ME, 2 * GiB + 300 * MiB), (HOST_OTHER, GiB), (4_000_300, GiB)]
    sample = prober().to_dict()
    validate(sample)
    (dev,) = sample["gpu"]["devices"]
    by_pid = {p["pid"]: p for p in dev["processes"]}
    assert by_pid[EXTERNAL]["relation"] == "external"
    assert {by_pid[p]["relation"] for p in (HOST_ME, HOST_OTHER, 4_000_300)} == {AMBIGUOUS}
    assert dev["uncertain"] == 2 * GiB + 300 * MiB + 2 * GiB
    assert dev["this_kernel"] is None and sample["kernel"]["gpu_used"] is None
    gpu.processes = [(EXTERNAL, 5 * GiB), (HOST_ME, 2 * GiB + 300 * MiB)]
    sample = prober().to_dict()
    (dev,) = sample["gpu"]["devices"]
    assert [p["relation"] for p in dev["processes"]] == ["external", PROBABLY_THIS_KERNEL]
    assert dev["this_kernel"] == 2 * GiB + 300 * MiB and dev["uncertain"] is None
    assert sample["kernel"]["gpu_used"] == 2 * GiB + 300 * MiB


def test_the_fd_signal_says_who_started_cuda(tmp_path):
    """A process with /dev/nvidia-uvm open has started CUDA; NVML alone opens only /dev/nvidiactl."""
    for pid, targets in {88: ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia-uvm"], 89: ["/dev/nvidiactl"]}.items():
        folder = tmp_path / str(pid) / "fd"
        folder.mkdir(parents=True)
        for number, target in enumerate(targets):
            (folder / str(number)).symlink_to(target)
    view = LocalView(proc=str(tmp_path))
    view.has_uvm = True
    assert (view.uses_cuda(88), view.uses_cuda(89), view.uses_cuda(90)) == (True, False, None)
    view.has_uvm = False  # a machine without the device: the signal means nothing there
    assert view.uses_cuda(88) is None
