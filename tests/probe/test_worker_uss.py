"""DataLoader workers' unique memory (USS): measured, below their summed RSS, rising with copy-on-read; null when the
platform cannot measure it; each worker read at most every few seconds."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import psutil
import pytest

from gpumem_kernel.probe import host as host_module
from gpumem_kernel.probe.host import HostReader, UssTracker

pytest.importorskip("torch")

# Runs in a subprocess (a fresh interpreter that forks its workers): a list of dicts of strings, iterated by two
# workers; the host reader of that process (its children are the workers) is read after the first batch and again
# near the end, when the workers have touched (refcount-written, so copied) most of the dataset.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch.utils.data as tud
    from gpumem_kernel.probe.host import HostReader

    data = [{"id": i, "text": "sample %d " % i * 4, "tags": ["a%d" % i, "b%d" % i]} for i in range(300_000)]

    class Objects(tud.Dataset):
        def __len__(self):
            return len(data)
        def __getitem__(self, i):
            row = data[i]
            return len(row["text"]) + len(row["tags"])

    loader = tud.DataLoader(Objects(), batch_size=10_000, num_workers=2, collate_fn=len,
                            multiprocessing_context="fork", prefetch_factor=1)
    reader = HostReader()
    reader.uss.interval = 0.0  # read every time here: the test is about the direction, not the cache
    n = len(loader)
    out = []
    for i, _ in enumerate(loader):
        if i in (0, n - 3):
            c = reader.children()
            out.append({"count": c.count, "rss": c.rss, "uss": c.uss, "pss": c.pss})
    print(json.dumps(out))
    """
)


def test_workers_unique_memory_is_measured_below_rss_and_grows_with_copy_on_read():
    if psutil.Process().memory_full_info().uss is None:  # pragma: no cover
        pytest.skip("no USS on this platform")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    first, late = json.loads(done.stdout.strip().splitlines()[-1])
    for reading in (first, late):
        assert reading["count"] == 2
        assert reading["uss"] is not None and reading["uss"] > 0
        assert reading["uss"] < reading["rss"]  # shared pages are counted once per worker in RSS only
        assert reading["pss"] is not None and reading["uss"] <= reading["pss"] <= reading["rss"]
    assert late["uss"] > first["uss"]  # copy-on-read: the workers' own copies of the objects they touched


class FakeProcess:
    def __init__(self, pid: int, uss: int, created: float = 1.0, fail: Exception | None = None) -> None:
        self.pid, self.uss, self.created, self.fail, self.reads = pid, uss, created, fail, 0

    def create_time(self) -> float:
        return self.created

    def memory_full_info(self):
        self.reads += 1
        if self.fail is not None:
            raise self.fail
        return _Full(self.uss)


class _Full:
    def __init__(self, uss: int) -> None:
        self.uss, self.pss = uss, uss + 10


def test_uss_is_cached_between_reads_and_its_growth_is_per_minute():
    now = [100.0]
    tracker = UssTracker(interval=5.0, clock=lambda: now[0])
    workers = [FakeProcess(1, 1000), FakeProcess(2, 2000)]

    assert tracker.update(workers) == (3000, 3020, None)  # one reading each: no growth yet
    workers[0].uss = 1500
    now[0] += 2.0
    assert tracker.update(workers) == (3000, 3020, None)  # within the interval: the cached value
    assert [w.reads for w in workers] == [1, 1]
    now[0] += 4.0  # 6 s after the first read
    uss, _pss, growth = tracker.update(workers)
    assert uss == 3500 and [w.reads for w in workers] == [2, 2]
    assert growth == 5000  # worker 1: +500 B in 6 s = 5000 B/min; worker 2: flat


def test_a_reused_pid_starts_a_new_history():
    now = [0.0]
    tracker = UssTracker(interval=5.0, clock=lambda: now[0])
    tracker.update([FakeProcess(7, 1000, created=1.0)])
    now[0] = 10.0
    assert tracker.update([FakeProcess(7, 9000, created=2.0)]) == (9000, 9010, None)


def test_without_full_memory_info_unique_memory_is_null(monkeypatch):
    # Only the platform call fails (as where smaps_rollup is missing or access is denied); RSS still counts.
    def refuse(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "memory_full_info", refuse)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reader = HostReader()
        children = reader.children()
        assert children.count >= 1 and children.rss > 0
        assert (children.uss, children.pss, children.uss_growth_per_min) == (None, None, None)
    finally:
        child.kill()
        child.wait()


def test_not_implemented_counts_as_unmeasurable():
    assert UssTracker().update([FakeProcess(3, 1, fail=NotImplementedError())]) == (None, None, None)
    assert host_module.USS_INTERVAL_S >= 2.0  # the cost stays bounded: one smaps_rollup read per worker per interval
