"""Container memory limits and CPU quotas read from fake cgroup v2, v1 and hybrid trees, and child-process
accounting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Tuple

import psutil

from gpumem_kernel.probe.host import CgroupReader, HostReader, usable_cpus

GiB = 1024**3
HOST_TOTAL = 64 * GiB


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def memory_in(tmp: Path) -> Tuple[Optional[int], Optional[int]]:
    """(limit, usage) read from the fake tree tmp/cg for a process whose /proc/self/cgroup is tmp/proc."""
    memory = CgroupReader(str(tmp / "cg"), str(tmp / "proc")).read(HOST_TOTAL)
    return memory.limit, memory.usage


def cpus_in(tmp: Path) -> int:
    return usable_cpus(str(tmp / "cg"), str(tmp / "proc"))


def test_v2_reads_limit_and_usage_of_the_kernel_cgroup(tmp_path):
    write(tmp_path / "proc", "0::/user.slice/jupyter.scope\n")
    write(tmp_path / "cg/user.slice/jupyter.scope/memory.max", f"{8 * GiB}\n")
    write(tmp_path / "cg/user.slice/jupyter.scope/memory.current", f"{3 * GiB}\n")

    assert memory_in(tmp_path) == (8 * GiB, 3 * GiB)


def test_v2_takes_the_tightest_limit_of_the_ancestors(tmp_path):
    write(tmp_path / "proc", "0::/kubepods/pod1/ctr\n")
    write(tmp_path / "cg/kubepods/pod1/ctr/memory.max", "max\n")
    write(tmp_path / "cg/kubepods/pod1/ctr/memory.current", f"{1 * GiB}\n")
    write(tmp_path / "cg/kubepods/pod1/memory.max", f"{4 * GiB}\n")
    write(tmp_path / "cg/kubepods/pod1/memory.current", f"{2 * GiB}\n")
    write(tmp_path / "cg/kubepods/memory.max", f"{32 * GiB}\n")

    assert memory_in(tmp_path) == (4 * GiB, 2 * GiB)


def test_v2_max_everywhere_means_unlimited(tmp_path):
    write(tmp_path / "proc", "0::/a\n")
    write(tmp_path / "cg/a/memory.max", "max\n")
    write(tmp_path / "cg/a/memory.current", "123\n")

    assert memory_in(tmp_path) == (None, None)


def test_v2_namespaced_container_sees_its_limit_at_the_mount_root(tmp_path):
    # Without a cgroup namespace the listed path does not exist under the container's mount.
    write(tmp_path / "proc", "0::/docker/0123abcd\n")
    write(tmp_path / "cg/memory.max", f"{6 * GiB}\n")
    write(tmp_path / "cg/memory.current", f"{1 * GiB}\n")

    assert memory_in(tmp_path) == (6 * GiB, 1 * GiB)


def test_v1_limit_and_usage(tmp_path):
    write(tmp_path / "proc", "4:memory:/process_api/abc\n3:cpuset:/\n0::/\n")
    write(tmp_path / "cg/memory/process_api/abc/memory.limit_in_bytes", f"{2 * GiB}\n")
    write(tmp_path / "cg/memory/process_api/abc/memory.usage_in_bytes", f"{GiB // 2}\n")
    write(tmp_path / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n")

    assert memory_in(tmp_path) == (2 * GiB, GiB // 2)


def test_v1_huge_or_above_host_ram_is_unlimited(tmp_path):
    write(tmp_path / "proc", "9:memory:/\n")
    write(tmp_path / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n")
    reader = CgroupReader(str(tmp_path / "cg"), str(tmp_path / "proc"))
    assert reader.read(HOST_TOTAL).limit is None

    write(tmp_path / "cg/memory/memory.limit_in_bytes", f"{HOST_TOTAL + GiB}\n")
    assert reader.read(HOST_TOTAL).limit is None


def test_hybrid_reads_the_v1_memory_controller_beside_an_empty_unified_tree(tmp_path):
    # systemd's hybrid layout: v1 controllers under /sys/fs/cgroup/<name>, cgroup2 (no controllers) at unified/
    write(tmp_path / "proc", "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n")
    write(tmp_path / "cg/memory/process_api/abc/memory.limit_in_bytes", f"{3 * GiB}\n")
    write(tmp_path / "cg/memory/process_api/abc/memory.usage_in_bytes", f"{GiB}\n")
    write(tmp_path / "cg/unified/cgroup.procs", "1\n")

    assert memory_in(tmp_path) == (3 * GiB, GiB)


def test_v1_without_a_memory_controller_means_no_limit(tmp_path):
    write(tmp_path / "proc", "3:cpu,cpuacct:/docker/abc\n2:pids:/docker/abc\n0::/\n")
    write(tmp_path / "cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n")

    assert memory_in(tmp_path) == (None, None)


def test_v1_memory_comounted_with_another_controller(tmp_path):
    # mounted as /sys/fs/cgroup/cpuset,memory with the `memory` link systemd makes beside it
    write(tmp_path / "proc", "5:cpuset,memory:/job\n")
    write(tmp_path / "cg/cpuset,memory/job/memory.limit_in_bytes", f"{5 * GiB}\n")
    write(tmp_path / "cg/cpuset,memory/job/memory.usage_in_bytes", f"{2 * GiB}\n")
    (tmp_path / "cg/memory").symlink_to("cpuset,memory")

    assert memory_in(tmp_path) == (5 * GiB, 2 * GiB)


def test_this_machines_cgroup_reads_as_a_limit_below_its_ram_or_none():
    # Whatever this machine is (v1, v2, hybrid, no cgroup fs): a limit is a real one, its usage read beside it.
    total = psutil.virtual_memory().total
    memory = CgroupReader().read(total)
    if memory.limit is None:
        assert memory.usage is None
    else:
        assert 0 < memory.limit < total
        assert memory.usage is None or memory.usage >= 0


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


# --- usable CPUs: this machine's affinity mask, capped by the cgroup's CPU quota ---------------------------------

AFFINITY = len(os.sched_getaffinity(0))  # this machine's: the quotas below can only lower it


def test_v2_cpu_quota_caps_the_affinity_and_the_tightest_ancestor_wins(tmp_path):
    write(tmp_path / "proc", "0::/kubepods/pod1/ctr\n")
    write(tmp_path / "cg/kubepods/pod1/ctr/cpu.max", "max 100000\n")
    write(tmp_path / "cg/kubepods/pod1/cpu.max", "250000 100000\n")  # 2.5 CPUs: a third worker would compete
    assert cpus_in(tmp_path) == min(AFFINITY, 2)

    write(tmp_path / "cg/kubepods/cpu.max", "50000 100000\n")  # half a CPU still runs one worker
    assert cpus_in(tmp_path) == 1


def test_v1_and_hybrid_cpu_quota_from_the_cpu_controller(tmp_path):
    # cpu,cpuacct co-mounted with systemd's `cpu` link, an empty unified tree beside it (hybrid)
    write(tmp_path / "proc", "3:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n")
    write(tmp_path / "cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n")
    write(tmp_path / "cg/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n")
    write(tmp_path / "cg/cpu,cpuacct/cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
    (tmp_path / "cg/cpu").symlink_to("cpu,cpuacct")
    (tmp_path / "cg/unified").mkdir()
    assert cpus_in(tmp_path) == min(AFFINITY, 2)

    write(tmp_path / "cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n")  # unlimited
    assert cpus_in(tmp_path) == AFFINITY


def test_without_a_cgroup_the_affinity_mask_counts_not_the_hosts_cores(tmp_path):
    assert usable_cpus(str(tmp_path / "missing"), str(tmp_path / "missing-proc")) == AFFINITY
    assert 1 <= usable_cpus() <= AFFINITY <= (os.cpu_count() or AFFINITY)  # this machine's own cgroup, if any


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
