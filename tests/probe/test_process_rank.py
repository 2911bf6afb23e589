"""The rank of a process started from the notebook (torchrun, notebook_launcher), from its environment: read from
/proc/PID/environ of real child processes, never an error, and carried on the sample's GPU process rows."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import psutil
import pytest

from fake_nvml import FakeGpu, GiB
from gpumem_kernel.probe.processes import parse_rank, rank_of
from gpumem_kernel.wire.protocol import ProcessRank, validate

pytestmark = pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/environ"), reason="needs Linux /proc")

SLEEPER = "import time; time.sleep(60)"


def _start(env: Dict[str, str]) -> subprocess.Popen:
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    child = subprocess.Popen([sys.executable, "-c", SLEEPER], env={**base, **env})
    deadline = time.monotonic() + 60  # until it has exec'd: before that /proc shows the parent's environment
    while time.monotonic() < deadline:
        try:
            if SLEEPER in " ".join(psutil.Process(child.pid).cmdline()):
                break
        except psutil.Error:
            pass
        time.sleep(0.05)
    return child


@pytest.fixture
def ranks() -> Iterator[List[subprocess.Popen]]:
    """Four ranks of one run as torchrun starts them (two machines' worth of LOCAL_RANK), and a plain child."""
    children = [_start({"RANK": str(r), "LOCAL_RANK": str(r % 2), "WORLD_SIZE": "4"}) for r in range(4)]
    children.append(_start({}))
    try:
        yield children
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_each_child_reads_as_its_rank_and_a_plain_child_as_none(ranks) -> None:
    found = [rank_of(child.pid, psutil.Process(child.pid).create_time()) for child in ranks]
    assert found == [ProcessRank(r, r % 2, 4) for r in range(4)] + [None]


def test_an_ended_process_has_no_rank(ranks) -> None:
    child = ranks[1]
    created = psutil.Process(child.pid).create_time()
    child.kill()
    child.wait()
    assert rank_of(child.pid) is None
    assert rank_of(child.pid, created + 1) is None  # the next read of that PID is a new process's


def test_an_unreadable_or_foreign_environment_is_no_rank(tmp_path: Path) -> None:
    (tmp_path / "41" / "environ").mkdir(parents=True)  # reading it fails (IsADirectoryError): no rank, no error
    assert rank_of(41, proc=str(tmp_path)) is None
    if os.getuid() != 0 and os.path.exists("/proc/1/environ"):
        assert rank_of(1) is None  # init is root's: not this user's, not read


def test_a_rank_found_is_remembered_and_no_rank_is_read_again(tmp_path: Path) -> None:
    """Just after a fork, before its exec, a process still shows its parent's environment: no rank then must not
    hide the rank its exec brings; a rank found stays with that (pid, create_time)."""
    (tmp_path / "42").mkdir()
    environ = tmp_path / "42" / "environ"
    environ.write_bytes(b"PATH=/bin\0")
    assert rank_of(42, 1000.0, proc=str(tmp_path)) is None
    environ.write_bytes(b"RANK=2\0LOCAL_RANK=2\0WORLD_SIZE=4\0")
    assert rank_of(42, 1000.0, proc=str(tmp_path)) == ProcessRank(2, 2, 4)
    environ.write_bytes(b"PATH=/bin\0")
    assert rank_of(42, 1000.0, proc=str(tmp_path)) == ProcessRank(2, 2, 4)
    assert rank_of(42, 2000.0, proc=str(tmp_path)) is None  # a reused PID: another process, read again


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (b"PATH=/bin\0RANK=3\0WORLD_SIZE=8\0", ProcessRank(3, None, 8)),
        (b"RANK=0\0LOCAL_RANK=0\0WORLD_SIZE=1", ProcessRank(0, 0, 1)),
        (b"RANK=2\0LOCAL_RANK=9\0WORLD_SIZE=4\0", ProcessRank(2, None, 4)),  # a LOCAL_RANK past the run: dropped
        (b"RANK=4\0WORLD_SIZE=4\0", None),  # a rank past the world size is not a launcher's
        (b"RANK=leader\0WORLD_SIZE=4\0", None),
        (b"RANK=1\0", None),
        (b"LOCAL_RANK=1\0WORLD_SIZE=2\0", None),
        (b"", None),
    ],
)
def test_only_a_whole_rank_below_the_world_size_is_a_rank(environ: bytes, expected: Optional[ProcessRank]) -> None:
    assert parse_rank(environ) == expected


def test_the_sample_lists_the_notebooks_ranks_on_their_gpu_rows(ranks, make_prober) -> None:
    """NVML lists the ranks (started from this process, as from the notebook's kernel): each row says its rank."""
    listed = [(child.pid, (i + 1) * GiB) for i, child in enumerate(ranks)]
    prober = make_prober([FakeGpu("NVIDIA H100", "GPU-1", total=80 * GiB, processes=listed)], pid=os.getpid())
    sample = prober().to_dict()
    validate(sample)
    (device,) = sample["gpu"]["devices"]
    by_pid = {p["pid"]: p for p in device["processes"]}
    assert {by_pid[child.pid]["relation"] for child in ranks} == {"notebook"}
    assert [by_pid[child.pid]["rank"] for child in ranks] == [
        {"rank": r, "local_rank": r % 2, "world_size": 4} for r in range(4)
    ] + [None]
