"""The kernel's descendants (DataLoader workers): listed from real processes, and, where only a walk over every
process can find them, that walk repeated within its CPU budget with nothing stale ever listed."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Dict, Iterator, List

import psutil
import pytest

from gpumem_kernel.probe import descendants as module
from gpumem_kernel.probe.descendants import Descendants, descendant_pids, parent_map
from gpumem_kernel.server.exits import ExitWatch

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def spawned() -> Iterator[List[subprocess.Popen]]:
    started: List[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def _start(started: List[subprocess.Popen], command: List[str]) -> subprocess.Popen:
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    started.append(process)
    return process


def test_children_and_grandchildren_are_listed_and_nothing_else(spawned) -> None:
    child = _start(spawned, SLEEPER)
    parent = _start(  # a worker that started its own child, whose PID it prints
        spawned,
        [
            sys.executable,
            "-c",
            f"import subprocess; p = subprocess.Popen({SLEEPER!r}); print(p.pid, flush=True); p.wait()",
        ],
    )
    grandchild = int(parent.stdout.readline())
    try:
        found = descendant_pids(os.getpid())
        assert {child.pid, parent.pid, grandchild} <= set(found)
        assert os.getpid() not in found and os.getppid() not in found and 1 not in found
        assert descendant_pids(child.pid) == []
    finally:
        os.kill(grandchild, 9)


def test_the_walk_sees_every_process_with_its_parent() -> None:
    before = set(psutil.pids())
    parents = parent_map()
    after = set(psutil.pids())
    assert parents[os.getpid()] == os.getppid()
    # As many processes as this machine shows (a container may hold only the test command and pytest),
    # not a count assumed from a desktop's.
    assert before & after <= set(parents)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_walk_is_repeated_only_within_its_budget_and_an_older_walk_lists_no_ended_worker(spawned) -> None:
    clock = Clock()
    me = os.getpid()
    # children an earlier test in this process left running (a DataLoader's workers until their iterator is
    # collected) are not this test's: the walk leaves them out
    earlier = {pid for pid, parent in parent_map().items() if parent == me}

    def walk() -> Dict[int, int]:
        clock.now += 0.05  # a walk that costs 50 ms: with a 1 % budget, the next one comes 5 s later
        return {pid: parent for pid, parent in parent_map().items() if pid not in earlier}

    seen = Descendants(budget=0.01, use_proc=False, clock=clock, walk=walk)
    first = _start(spawned, SLEEPER)
    assert seen.of(me) == [first.pid] and seen.walks == 1

    second = _start(spawned, SLEEPER)
    clock.now = 1.0
    assert seen.of(me) == [first.pid] and seen.walks == 1  # the walk is not repeated yet: the new one waits

    first.kill()
    first.wait()
    clock.now = 2.0
    assert seen.of(me) == [] and seen.walks == 1  # the ended worker is not listed from the older walk

    clock.now = 5.06
    assert seen.of(me) == [second.pid] and seen.walks == 2


def test_where_proc_lists_children_no_walk_is_made(spawned, monkeypatch) -> None:
    child = _start(spawned, SLEEPER)
    monkeypatch.setattr(module, "_via_proc", lambda pid: [child.pid] if pid == os.getpid() else [])
    seen = Descendants(use_proc=True, walk=lambda: pytest.fail("walked although /proc lists children"))
    assert seen.of(os.getpid()) == [child.pid] and seen.walks == 0


def test_the_servers_exit_watch_walks_once_for_every_kernel(spawned, tmp_path) -> None:
    kernels = {name: _start(spawned, SLEEPER) for name in ("k1", "k2", "k3")}
    manager = SimpleNamespace(
        list_kernel_ids=lambda: list(kernels),
        get_kernel=lambda kernel_id: SimpleNamespace(provisioner=SimpleNamespace(process=kernels[kernel_id])),
    )
    clock = Clock()

    def walk() -> Dict[int, int]:
        clock.now += 0.05
        return parent_map()

    seen = Descendants(use_proc=False, clock=clock, walk=walk)
    watch = ExitWatch(
        manager, cgroup_root=str(tmp_path), proc=str(tmp_path), vmstat=str(tmp_path / "vmstat"), descendants=seen
    )
    watch.sync()
    watch.sync()
    assert seen.walks == 1  # three kernels, two looks each: one walk of the machine
    kernels["k2"].kill()
    kernels["k2"].wait()
    watch.sync()
    assert [death.pid for death in watch.exits("k2")] == [kernels["k2"].pid] and seen.walks == 1
