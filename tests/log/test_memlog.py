"""The memory log in this process: its rows (a fake GPU through the real prober), the file checks, the interval,
the thinning of a faster sampler, and the sampler's interval while a log runs."""

from __future__ import annotations

import csv
import os
import time

import pytest

import gpumem_kernel
from fake_nvml import FakeGpu, GiB, pre_volta
from gpumem_kernel.log import csvlog
from gpumem_kernel.probe.sampler import Sampler


def read(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def wait_rows(log, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while log.rows_written < n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.rows_written >= n, log.status()


def test_a_row_per_device_with_the_samples_figures(tmp_path, make_prober):
    prober = make_prober([FakeGpu("A100", "GPU-a", used=3 * GiB), pre_volta("P100", "GPU-b", total=15 * GiB)])
    sampler = Sampler(prober, interval=0.05)
    sampler.start()
    try:
        log = csvlog.MemoryLog(str(tmp_path / "m.csv"), 0.05, sampler=sampler)
        wait_rows(log, 6)
        log.stop()
    finally:
        sampler.stop()
    table = read(tmp_path / "m.csv")
    assert table[0] == list(csvlog.COLUMNS)
    body = table[1:]
    assert len(body) == log.rows_written and len(body) % 2 == 0
    first, second = body[0], body[1]
    assert first[0] == second[0] and first[1] == second[1]  # one sample, two devices
    assert first[0].endswith("Z") and abs(float(first[1]) - time.time()) < 60
    assert [first[2], second[2]] == ["cuda:0", "cuda:1"]
    assert first[3:5] == [str(3 * GiB), str(16 * GiB)] and second[4] == str(15 * GiB)
    assert first[5:8] == ["", "", ""]  # CUDA not initialised in this process: no allocator figures, empty cells
    assert first[8:10] == ["37", "12"] and int(first[10]) > 0
    assert first[11:13] == ["250.000", "320.000"] and float(first[13]) >= 7200  # watts, joules since driver load
    assert second[11:] == ["250.000", "320.000", ""]  # before Volta: power, no energy counter


def test_rows_look_like_the_iso_time_and_epoch_of_the_same_millisecond():
    sample = {"time": 1700000000.1234, "gpu": {"devices": []}, "host": {"rss": 5}}
    head = ["2023-11-14T22:13:20.123Z", "1700000000.123"]
    assert csvlog.rows(sample) == [head + [""] * 8 + ["5", "", "", ""]]


def test_a_faster_sampler_is_thinned_and_a_slower_one_sped_up_then_restored(tmp_path, make_prober):
    sampler = Sampler(make_prober([]), interval=0.02)
    sampler.start()
    try:
        log = csvlog.MemoryLog(str(tmp_path / "thin.csv"), 0.2, sampler=sampler)
        time.sleep(1.0)
        log.stop()
        times = [float(row[1]) for row in read(tmp_path / "thin.csv")[1:]]
        assert 3 <= len(times) <= 6
        assert all(b - a >= 0.2 * 0.9 - 0.002 for a, b in zip(times, times[1:]))
        sampler.configure(interval=2.0)
        log = csvlog.MemoryLog(str(tmp_path / "fast.csv"), 0.1, sampler=sampler)
        assert sampler.interval == 0.1
        wait_rows(log, 3)
        log.stop()
        assert sampler.interval == 2.0
    finally:
        sampler.stop()


def test_an_existing_file_with_the_header_is_appended_to(tmp_path):
    path = tmp_path / "a.csv"
    for _ in range(2):
        log = gpumem_kernel.log_gpu_memory(str(path), interval=0.05)
        wait_rows(log, 2)
        log.stop()
    table = read(path)
    assert table.count(list(csvlog.COLUMNS)) == 1 and table[0] == list(csvlog.COLUMNS)
    assert len(table) - 1 >= 4 and all(len(row) == len(csvlog.COLUMNS) for row in table)


def test_bad_paths_are_one_line_and_write_nothing(tmp_path, monkeypatch):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    cases = {
        str(tmp_path): "is a directory",
        str(tmp_path / "missing" / "m.csv"): "does not exist",
        str(other): "exists with another header",
    }
    for path, words in cases.items():
        with pytest.raises(ValueError, match=words) as error:
            gpumem_kernel.log_gpu_memory(path)
        assert "\n" not in str(error.value)
    assert other.read_text() == "a,b\n1,2\n"
    assert not (tmp_path / "missing").exists()

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(csvlog, "open", refuse, raising=False)  # root can write anywhere: refuse as a mode 0444 file
    with pytest.raises(ValueError, match=r"cannot write to .*ro\.csv: Permission denied"):
        gpumem_kernel.log_gpu_memory(str(tmp_path / "ro.csv"))
    assert not (tmp_path / "ro.csv").exists()


@pytest.mark.parametrize(
    "text, seconds", [("1s", 1.0), ("200ms", 0.2), ("0.5", 0.5), ("2m", 120.0), (0.25, 0.25), (" 3S ", 3.0)]
)
def test_intervals(text, seconds):
    assert csvlog.parse_interval(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["fast", "0", "-1s", "1ms", "nan", "2h", ""])
def test_bad_intervals(text):
    with pytest.raises(ValueError, match="interval"):
        csvlog.parse_interval(text)


def test_a_log_without_the_extension_runs_its_own_sampler_and_ends_it(tmp_path):
    from gpumem_kernel.probe import snapshot

    assert snapshot.running_sampler() is None
    with gpumem_kernel.log_gpu_memory(str(tmp_path / "own.csv"), interval=0.05) as log:
        wait_rows(log, 2)
        assert log._own_sampler and log._sampler.running
    assert snapshot.running_sampler() is None and not log._sampler.running
    assert "stopped logging" in log.status() and os.path.getsize(tmp_path / "own.csv") > 0


def test_the_panels_download_csv_names_the_same_columns():
    """src/panel/samplescsv.ts writes the panel sample chart's CSV in the log's columns: the same list, in order."""
    import re
    from pathlib import Path

    source = (Path(__file__).resolve().parents[2] / "src" / "panel" / "samplescsv.ts").read_text("utf-8")
    listed = re.search(r"CSV_COLUMNS: ReadonlyArray<string> = \[(.*?)\];", source, re.S)
    assert listed is not None
    assert tuple(re.findall(r"'([a-z_]+)'", listed.group(1))) == csvlog.COLUMNS
