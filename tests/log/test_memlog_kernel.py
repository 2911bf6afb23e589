"""The memory log in a real ipykernel: `%gpumem log` at 0.2 s, then `kill -9` of the kernel: the file holds
rows up to at most one interval before the kill, and only complete CSV lines; append; bad paths."""

from __future__ import annotations

import csv
import os
import signal
import time

import pytest

from gpumem_kernel.log.csvlog import COLUMNS, HEADER
from kernel_harness import KernelHarness

pytestmark = pytest.mark.kernel

INTERVAL = 0.2
# The sampler's thread probes, then a writer thread writes: a row reaches the file a few ms after its
# sample's time; on 2 loaded cores a probe can take longer. The margin is for that delay, not for lost rows.
SLACK = 0.15


def stream(kernel: KernelHarness, code: str) -> str:
    start = len(kernel.messages())
    reply = kernel.execute(code)
    text = "".join(
        m.content.get("text", "") + m.content.get("evalue", "")
        for m in kernel.messages()[start:]
        if m.parent_id == reply["msg_id"] and m.msg_type in ("stream", "error")
    )
    return text


def test_a_kill_9_loses_at_most_one_interval_and_leaves_complete_lines(tmp_path):
    path = tmp_path / "kill.csv"
    with KernelHarness() as kernel:
        kernel.bootstrap()
        out = stream(kernel, f"%gpumem log start {path} --interval 200ms")
        assert f"logging GPU memory to {path} every 0.2 s" in out
        pid = kernel.evaluate("__import__('os').getpid()")
        time.sleep(2.0)
        kill_time = time.time()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while kernel.km.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    data = path.read_bytes().decode()
    assert data.endswith("\n")
    lines = data.splitlines()
    assert lines[0] == HEADER
    rows = list(csv.reader(lines[1:]))
    assert len(rows) >= 2.0 / INTERVAL * 0.6
    assert all(len(row) == len(COLUMNS) for row in rows)
    times = [float(row[1]) for row in rows]
    lost = kill_time - times[-1]
    print(f"rows {len(rows)}, last row {lost:.3f} s before the kill")
    assert 0 <= lost <= INTERVAL + SLACK
    assert all(int(row[10]) > 0 for row in rows)  # host RSS; no GPU here: empty device cells


def test_magic_status_stop_append_and_bad_paths(tmp_path):
    path = tmp_path / "m.csv"
    other = tmp_path / "other.csv"
    other.write_text("x,y\n")
    with KernelHarness() as kernel:
        kernel.bootstrap()
        assert "not logging" in stream(kernel, "%gpumem log")
        for _ in range(2):
            stream(kernel, f"%gpumem log start {path} --interval 0.1")
            assert "already logging" in stream(kernel, f"%gpumem log start {tmp_path / 'n.csv'}")
            time.sleep(0.5)
            assert f"logging GPU memory to {path} every 0.1 s" in stream(kernel, "%gpumem log status")
            assert "stopped logging" in stream(kernel, "%gpumem log stop")
        assert "not logging" in stream(kernel, "%gpumem log stop")
        for line, words in (
            (f"start {tmp_path}", "is a directory"),
            (f"start {tmp_path / 'no' / 'x.csv'}", "does not exist"),
            (f"start {other}", "exists with another header"),
            ("start", "start needs a file"),
            (f"start {tmp_path / 'i.csv'} --interval soon", "is not a duration"),
        ):
            out = stream(kernel, f"%gpumem log {line}")
            assert out.startswith("UsageError: gpumem log: ") and words in out and out.count("\n") <= 1, out
        assert "--interval T" in stream(kernel, "%gpumem log --help")
    lines = path.read_text().splitlines()
    assert lines.count(HEADER) == 1 and lines[0] == HEADER and len(lines) >= 1 + 2 * 3
    assert other.read_text() == "x,y\n" and not (tmp_path / "i.csv").exists()
