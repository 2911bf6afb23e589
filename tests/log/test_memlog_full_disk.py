"""The memory log on a full or unwritable disk: one line at start, and a write that fails later stops the log,
gives the sampler back (no listener, its own interval) and says so once, to the panel and in the next cell.

The disks are real: /dev/full (every write fails with ENOSPC), a tiny tmpfs where root may mount one, a path
under a file and one in /proc (the tests run as root, so a mode-0444 folder would not refuse anything)."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List

import jsonschema
import pytest

import gpumem_kernel
from conftest import gpumem_shell
from gpumem_kernel.log import csvlog
from gpumem_kernel.magics import memlog
from gpumem_kernel.probe.sampler import Sampler
from gpumem_kernel.wire.protocol import load_schema

DEV_FULL = "/dev/full"
needs_dev_full = pytest.mark.skipif(not os.path.exists(DEV_FULL), reason="no /dev/full on this system")


def wait_until(condition, what: str, timeout: float = 60.0) -> None:
    """Waits for the writer's thread; the timeout only ends a hung test, it asserts no speed."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition(), what


@contextlib.contextmanager
def tiny_disk(folder: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs at `folder`, nearly filled: a few rows fit, then the disk is full. Skipped where this
    process may not mount one (no root, a container without CAP_SYS_ADMIN)."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip() or done.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path, leave: int) -> None:
    """Write a filler file until at most `leave` bytes are free on the folder's disk."""
    with open(folder / "filler", "wb") as filler:
        with contextlib.suppress(OSError):
            while True:
                st = os.statvfs(folder)
                free = st.f_bfree * st.f_frsize
                if free <= leave:
                    break
                filler.write(b"\0" * min(4096, free - leave))
                filler.flush()


def complete_lines(path: Path) -> List[str]:
    data = path.read_text()
    assert data == "" or data.endswith("\n"), "a half-written row"
    return data.splitlines()


# --- at start: one line --------------------------------------------------------------------------------------


@needs_dev_full
def test_a_full_disk_at_start_is_one_line_and_leaves_the_device_alone():
    with pytest.raises(ValueError) as error:
        gpumem_kernel.log_gpu_memory(DEV_FULL)
    assert str(error.value) == f"cannot write to {DEV_FULL}: No space left on device"
    assert stat.S_ISCHR(os.stat(DEV_FULL).st_mode)  # never removed: the log did not create it


def test_a_full_tmpfs_at_start_is_one_line_and_leaves_no_file(tmp_path):
    with tiny_disk(tmp_path / "disk") as disk:
        fill(disk, leave=0)
        with pytest.raises(ValueError) as error:
            gpumem_kernel.log_gpu_memory(str(disk / "m.csv"))
        assert str(error.value).startswith(f"cannot write to {disk / 'm.csv'}: No space left on device")
        assert not (disk / "m.csv").exists()


@pytest.mark.parametrize(
    "where, words",
    [
        ("under-a-file", "is a file, not a folder"),
        ("proc", "cannot write to /proc/gpumem-log-test.csv: "),
    ],
)
def test_an_unwritable_place_is_one_line(tmp_path, where, words):
    if where == "proc":
        if not os.path.isdir("/proc/self"):
            pytest.skip("no /proc on this system")
        path = "/proc/gpumem-log-test.csv"
    else:
        (tmp_path / "plain").write_text("not a folder\n")
        path = str(tmp_path / "plain" / "m.csv")
    with pytest.raises(ValueError, match=words) as error:
        gpumem_kernel.log_gpu_memory(path)
    assert "\n" not in str(error.value) and not os.path.exists(path)


# --- a write that fails while logging --------------------------------------------------------------------


def test_a_failed_write_stops_the_log_gives_the_sampler_back_and_says_so_once(tmp_path, make_prober):
    sampler = Sampler(make_prober([]), interval=2.0)  # not started: each sample is taken by the test
    told: List[str] = []
    log = csvlog.MemoryLog(str(tmp_path / "m.csv"), 0.05, sampler=sampler, on_stopped=told.append)
    assert sampler.interval == 0.05 and sampler.listener_count == 1
    sampler.sample_once()
    wait_until(lambda: log.rows_written == 1, "the first row")
    if os.path.exists(DEV_FULL):
        log._file = open(DEV_FULL, "a", encoding="utf-8", newline="")  # from here every write gets ENOSPC
    else:
        log._file.close()  # a closed file: the write fails all the same
    time.sleep(0.06)  # the next sample must be one interval later, or the log thins it out
    sampler.sample_once()
    wait_until(lambda: not log.running, "the log stops")

    assert told == [
        f"gpumem log: stopped logging to {tmp_path / 'm.csv'} after 1 rows: "
        + ("No space left on device" if os.path.exists(DEV_FULL) else "ValueError: I/O operation on closed file.")
        + "; sampling is back to every 2 s"
    ]
    assert sampler.listener_count == 0 and sampler.interval == 2.0
    assert "stopped logging" in log.status() and "stopped by an error" in log.status()
    for _ in range(3):
        sampler.sample_once()
    log.stop()
    assert len(told) == 1
    lines = complete_lines(tmp_path / "m.csv")
    assert lines[0] == csvlog.HEADER and len(lines) == 2


def test_a_disk_that_fills_while_logging_stops_the_magics_log_and_tells_the_panel_and_the_next_cell(tmp_path, capsys):
    with tiny_disk(tmp_path / "disk") as disk, gpumem_shell() as shell:
        sent: List[dict] = []
        kernel = gpumem_kernel.extension.current()
        kernel.memlog = memlog.Keeper(shell, sent.append)  # what the channel would broadcast to every panel
        sampler = kernel.sampler
        before = sampler.interval
        path = disk / "m.csv"
        fill(disk, leave=4096)  # one page: the header and a few dozen rows
        shell.run_line_magic("gpumem", f"log start {path} --interval 50ms")
        assert f"logging GPU memory to {path} every 0.05 s" in capsys.readouterr().out
        log = kernel.memlog.current
        wait_until(lambda: not log.running, "the disk fills and the log stops")
        assert sampler.interval == before

        assert len(sent) == 1
        jsonschema.Draft202012Validator(load_schema("error")).validate(sent[0])
        line = sent[0]["message"]
        assert sent[0]["id"] is None
        assert line.startswith(f"gpumem log: stopped logging to {path} after ")
        assert line.endswith(f": No space left on device; sampling is back to every {before:g} s")

        shell.run_cell("x = 1")
        assert capsys.readouterr().err.strip() == line  # the next cell says it, once
        shell.run_cell("x = 2")
        assert capsys.readouterr().err == ""
        shell.run_line_magic("gpumem", "log")
        assert "stopped by an error: No space left on device" in capsys.readouterr().out
        shell.run_line_magic("gpumem", "log stop")
        capsys.readouterr()
        lines = complete_lines(path)
        assert lines[0] == csvlog.HEADER and all(row.count(",") == len(csvlog.COLUMNS) - 1 for row in lines)


@needs_dev_full
def test_the_magic_says_a_full_disk_in_one_usage_line(capsys):
    with gpumem_shell():
        from IPython.core.error import UsageError

        with pytest.raises(UsageError) as error:
            memlog.log(gpumem_kernel.extension.current(), f"start {DEV_FULL}")
    assert str(error.value) == f"gpumem log: cannot write to {DEV_FULL}: No space left on device"


if sys.platform != "linux":  # /dev/full, tmpfs and /proc are Linux's
    pytestmark = pytest.mark.skip(reason="Linux only")
