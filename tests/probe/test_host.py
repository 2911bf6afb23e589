"""Container memory limits read from fake cgroup v2 and v1 trees, and child-process accounting."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from gpumem_kernel.probe.host import CgroupReader, HostReader

GiB = 1024**3
HOST_TOTAL = 64 * GiB


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_v2_reads_limit_and_usage_of_the_kernel_cgroup(tmp_path):
    write(tmp_path / "proc", "0::/user.slice/jupyter.scope\n")
    write(tmp_path / "cg/user.slice/jupyter.scope/memory.max", f"{8 * GiB}\n")
    write(tmp_path / "cg/user.slice/jupyter.scope/memory.current", f"{3 * GiB}\n")

    memory = CgroupReader(str(tmp_path / "cg"), str(tmp_path / "proc")).read(HOST_TOTAL)

    assert (memory.limit, memory.usage) == (8 * GiB, 3 * GiB)


def test_v2_takes_the_tightest_limit_of_the_ancestors(tmp_path):
    write(tmp_path / "proc", "0::/kubepods/pod1/ctr\n")
    write(tmp_path / "cg/kubepods/pod1/ctr/memory.max", "max\n")
    write(tmp_path / "cg/kubepods/pod1/ctr/memory.current", f"{1 * GiB}\n")
    write(tmp_path / "cg/kubepods/pod1/memory.max", f"{4 * GiB}\n")
    write(tmp_path / "cg/kubepods/pod1/memory.current", f"{2 * GiB}\n")
    write(tmp_path / "cg/kubepods/memory.max", f"{32 * GiB}\n")

    memory = CgroupReader(str(tmp_path / "cg"), str(tmp_path / "proc")).read(HOST_TOTAL)

    assert (memory.limit, memory.usage) == (4 * GiB, 2 * GiB)


def test_v2_max_everywhere_means_unlimited(tmp_path):
    write(tmp_path / "proc", "0::/a\n")
    write(tmp_path / "cg/a/memory.max", "max\n")
    write(tmp_path / "cg/a/memory.current", "123\n")

    memory = CgroupReader(str(tmp_path / "cg"), str(tmp_path / "proc")).read(HOST_TOTAL)

    assert (memory.limit, memory.usage) == (None, None)


def test_v2_namespaced_container_sees_its_limit_at_the_mount_root(tmp_path):
    # Without a cgroup namespace the listed path does not exist under the container's mount.
    write(tmp_path / "proc", "0::/docker/0123abcd\n")
    write(tmp_path / "cg/memory.max", f"{6 * GiB}\n")
    write(tmp_path / "cg/memory.current", f"{1 * GiB}\n")

    memory = CgroupReader(str(tmp_path / "cg"), str(tmp_path / "proc")).read(HOST_TOTAL)

    assert (memory.limit, memory.usage) == (6 * GiB, 1 * GiB)


def test_v1_limit_and_usage(tmp_path):
    write(tmp_path / "proc", "4:memory:/process_api/abc\n3:cpuset:/\n0::/\n")
    write(tmp_path / "cg/memory/process_api/abc/memory.limit_in_bytes", f"{2 * GiB}\n")
    write(tmp_path / "cg/memory/process_api/abc/memory.usage_in_bytes", f"{GiB // 2}\n")
    write(tmp_path / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n")

    memory = CgroupReader(str(tmp_path / "cg"), str(tmp_path / "proc")).read(HOST_TOTAL)

    assert (memory.limit, memory.usage) == (2 * GiB, GiB // 2)


def test_v1_huge_or_above_host_ram_is_unlimited(tmp_path):
    write(tmp_path / "proc", "9:memory:/\n")
    write(tmp_path / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n")
    reader = CgroupReader(str(tmp_path / "cg"), str(tmp_path / "proc"))
    assert reader.read(HOST_TOTAL).limit is None

    write(tmp_path / "cg/memory/memory.limit_in_bytes", f"{HOST_TOTAL + GiB}\n")
    assert reader.read(HOST_TOTAL).limit is None


def test_limit_change_is_seen_on_the_next_read(tmp_path):
    write(tmp_path / "proc", "0::/a\n")
    write(tmp_path / "cg/a/memory.max", f"{8 * GiB}\n")
    reader = CgroupReader(str(tmp_path / "cg"), str(tmp_path / "proc"))
    assert reader.read(HOST_TOTAL).limit == 8 * GiB

    write(tmp_path / "cg/a/memory.max", f"{2 * GiB}\n")
    assert reader.read(HOST_TOTAL).limit == 2 * GiB


def test_no_cgroup_files_means_no_limit(tmp_path):
    memory = CgroupReader(str(tmp_path / "missing"), str(tmp_path / "missing-proc")).read(HOST_TOTAL)
    assert (memory.limit, memory.usage) == (None, None)


def test_children_counts_workers_and_their_grandchildren(tmp_path):
    # a worker that itself starts a worker, like a DataLoader worker spawning a helper
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    )
    worker = subprocess.Popen([sys.executable, "-c", code])
    try:
        reader = HostReader(cgroup=CgroupReader(str(tmp_path / "x"), str(tmp_path / "y")))
        for _ in range(100):
            children = reader.children()
            if children.count >= 2:
                break
            time.sleep(0.05)
        assert children.count >= 2

        # a just-started interpreter's RSS still grows: compare once the processes' RSS has settled
        def summed() -> int:
            return sum(p.memory_info().rss for p in psutil.Process().children(recursive=True))

        before = summed()
        for _ in range(50):
            time.sleep(0.1)
            now = summed()
            if abs(now - before) <= 0.02 * now:
                break
            before = now
        children = reader.children()
        expected = summed()
        assert abs(children.rss - expected) <= 0.2 * expected
    finally:
        for p in psutil.Process(worker.pid).children(recursive=True):
            p.kill()
        worker.kill()
        worker.wait()
