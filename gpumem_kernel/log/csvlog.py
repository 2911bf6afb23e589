"""The memory log: every sample of the kernel's sampler as CSV rows, one per device, appended to a file.

The sampler's thread only puts the sample on a queue (a listener must not block it); a writer thread turns it
into rows, writes them in one call and flushes, so a killed kernel leaves complete lines and loses at most the
sample being written. It calls `os.fsync` at most once per interval (a machine crash loses at most one
interval). When the log asks for a shorter interval than the sampler's, the sampler samples faster while the
log runs and goes back to its interval at the end (unless the panel changed it meanwhile). Without the
extension loaded (a script), the log runs its own sampler.

The columns are the panel's "Download CSV" columns too (src/panel/samplescsv.ts).
"""

from __future__ import annotations

import csv
import io
import logging
import os
import queue
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional

from gpumem_kernel.probe import snapshot
from gpumem_kernel.probe.sampler import Sampler

COLUMNS = (
    "time_iso",
    "time_epoch",
    "device",
    "used_bytes",
    "total_bytes",
    "allocated_bytes",
    "reserved_bytes",
    "peak_allocated_bytes",
    "util_gpu_percent",
    "util_mem_percent",
    "host_rss_bytes",
    "power_watts",
    "power_limit_watts",
    "energy_joules",
)
log = logging.getLogger("gpumem_kernel")

HEADER = ",".join(COLUMNS)
MIN_INTERVAL = 0.05

SampleDict = Dict[str, Any]


class LogError(ValueError):
    """A path the log cannot write to, or a file with another header: one line, nothing written."""


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _milli(value: Any) -> str:
    """NVML's milliwatts / millijoules as watts / joules with three decimals, exactly (no float rounding)."""
    return "" if value is None else f"{int(value) // 1000}.{int(value) % 1000:03d}"


def device_label(device: Dict[str, Any]) -> str:
    """`cuda:N` as this kernel's torch numbers it, else `nvml:N` (a GPU CUDA does not see)."""
    cuda = device.get("cuda_index")
    return f"cuda:{cuda}" if cuda is not None else f"nvml:{device.get('nvml_index')}"


def iso_time(epoch: float) -> str:
    """UTC with milliseconds and a Z, as JavaScript's Date.toISOString writes it."""
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rows(sample: SampleDict) -> List[List[str]]:
    """The CSV rows of one sample: one per device, or one with an empty device when there is no GPU."""
    epoch = round(float(sample["time"]) * 1000) / 1000  # the ISO time and the epoch say the same millisecond
    host = (sample.get("host") or {}).get("rss")
    head = [iso_time(epoch), f"{epoch:.3f}"]
    devices = (sample.get("gpu") or {}).get("devices") or []
    if not devices:
        return [head + [""] * 8 + [_cell(host), "", "", ""]]
    out = []
    for device in devices:
        allocator = device.get("allocator") or {}
        out.append(
            head
            + [
                device_label(device),
                _cell(device.get("used")),
                _cell(device.get("total")),
                _cell(allocator.get("allocated")),
                _cell(allocator.get("reserved")),
                _cell(allocator.get("peak_allocated")),
                _cell(device.get("util_gpu")),
                _cell(device.get("util_mem")),
                _cell(host),
                _milli(device.get("power_mw")),
                _milli(device.get("power_limit_mw")),
                _milli(device.get("energy_mj")),
            ]
        )
    return out


def csv_text(lines: List[List[str]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(lines)
    return buffer.getvalue()


def parse_interval(text: Any) -> float:
    """Seconds from `1s`, `200ms`, `0.5`, `2m`; a ValueError with one line otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        raw = str(text).strip().lower()
        scale = 1.0
        for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
            if raw.endswith(suffix):
                raw, scale = raw[: -len(suffix)], factor
                break
        try:
            seconds = float(raw) * scale
        except ValueError:
            raise ValueError(f"interval {text!r} is not a duration (e.g. 1s, 200ms, 0.5)") from None
    if not seconds == seconds or seconds < MIN_INTERVAL or seconds > 3600:  # NaN, too fast, too slow
        raise ValueError(f"interval {text!r} must be between {MIN_INTERVAL} s and 1 h")
    return seconds


def _reason(error: BaseException) -> str:
    """What went wrong, in the system's words: "No space left on device", not "[Errno 28] ..."."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return f"{type(error).__name__}: {error}".splitlines()[0]


def _disk_full(folder: str) -> bool:
    """No block left for this process on the folder's file system (root may use the reserved ones)."""
    if not hasattr(os, "statvfs"):
        return False
    try:
        stats = os.statvfs(folder)
    except OSError:
        return False
    is_root = getattr(os, "geteuid", lambda: -1)() == 0
    return (stats.f_bfree if is_root else stats.f_bavail) == 0 and stats.f_blocks > 0


def _check_folder(path: str) -> None:
    if os.path.isdir(path):
        raise LogError(f"{path} is a directory; give a file name, e.g. {os.path.join(path, 'gpumem.csv')}")
    parent = os.path.dirname(path)
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise LogError(f"cannot log to {path}: {parent} is a file, not a folder")
    if not os.path.isdir(parent):
        raise LogError(f"cannot log to {path}: its folder {parent} does not exist")
    if _disk_full(parent):
        raise LogError(f"cannot write to {path}: No space left on device (its disk is full)")


def _check_header(path: str) -> bool:
    """True for a new (or empty) file; a LogError when an existing file has another header."""
    if not (os.path.exists(path) and os.path.getsize(path) > 0):
        return True
    try:
        with open(path, encoding="utf-8", newline="") as existing:
            first = existing.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as error:
        raise LogError(f"cannot read {path} to check its header: {error}") from None
    if first != HEADER:
        raise LogError(
            f"{path} exists with another header ({first[:60]!r}); nothing written: choose another file or remove it"
        )
    return False


def _write_header(handle: Any, path: str, created: bool) -> None:
    """The header, flushed now: a full disk says so here, in one line, not at the first row. A file this call
    created is removed again, so a failed start leaves nothing behind."""
    try:
        handle.write(HEADER + "\n")
        handle.flush()
    except OSError as error:
        try:
            handle.close()
        except OSError:
            pass  # closing flushes the same unwritable header again
        if created and os.path.isfile(path):
            os.remove(path)
        raise LogError(f"cannot write to {path}: {_reason(error)}") from None


def open_log(path: str) -> Any:
    """The file opened for appending, after the checks; a LogError with one line when it cannot be used."""
    path = os.path.abspath(os.path.expanduser(str(path)))
    _check_folder(path)
    fresh = _check_header(path)
    existed = os.path.exists(path)
    try:
        handle = open(path, "a", encoding="utf-8", newline="")
    except OSError as error:
        raise LogError(f"cannot write to {path}: {error.strerror or error}") from None
    if fresh:
        _write_header(handle, path, created=not existed)
    return handle


OnStopped = Callable[[str], None]


def _say_on_stderr(line: str) -> None:
    """Without a front end to tell (a script), the line goes where a script's warnings go."""
    print(line, file=sys.stderr, flush=True)


class MemoryLog:
    """A running log; `stop()` ends it (idempotent). Use `log_gpu_memory` to start one.

    A write that fails (a full disk, a removed mount) stops the log as `stop()` would: the sampler loses its
    listener and gets its interval back, and `on_stopped` is called once, from the writer's thread, with the
    one line that says so (`stopped_line()`).
    """

    def __init__(
        self,
        path: str,
        interval: float = 1.0,
        sampler: Optional[Sampler] = None,
        on_stopped: OnStopped = _say_on_stderr,
    ) -> None:
        self.interval = parse_interval(interval)
        self._file = open_log(path)
        self.path = os.path.abspath(os.path.expanduser(str(path)))
        self._whole_size = os.fstat(self._file.fileno()).st_size  # the file's length up to its last whole row
        self.rows_written = 0
        self.started = time.time()
        self.error: Optional[str] = None
        self.restored_interval: Optional[float] = None  # the sampler's own interval, once given back
        self._on_stopped = on_stopped
        self._queue: "queue.SimpleQueue[Optional[SampleDict]]" = queue.SimpleQueue()
        self._last_time: Optional[float] = None
        self._stopped = False
        self._released = False
        self._release_lock = threading.Lock()
        self._own_sampler = False
        self._restore_interval: Optional[float] = None
        if sampler is None:
            sampler = snapshot.running_sampler()
        if sampler is None:  # no extension loaded: a sampler of our own, over a prober of our own
            from gpumem_kernel.probe.prober import default_prober

            sampler = Sampler(default_prober(), interval=self.interval, history_seconds=60)
            self._own_sampler = True
        self._sampler = sampler
        if sampler.interval > self.interval:
            self._restore_interval = sampler.interval
            sampler.configure(interval=self.interval)
        self._writer = threading.Thread(target=self._write, name="gpumem-log", daemon=True)
        self._writer.start()
        sampler.add_listener(self._on_sample)
        if self._own_sampler:
            sampler.start()

    # --- the sampler's thread: nothing but a put --------------------------------------------------

    def _on_sample(self, sample: SampleDict) -> None:
        self._queue.put(sample)

    # --- the writer's thread ---------------------------------------------------------------------

    def _due(self, sample: SampleDict) -> bool:
        """A sample at least (nearly) one interval after the last row: a faster sampler is thinned out."""
        t = float(sample.get("time", 0.0))
        if self._last_time is not None and t < self._last_time + self.interval * 0.9:
            return False
        self._last_time = t
        return True

    def _write_sample(self, sample: SampleDict, last_sync: float) -> float:
        lines = rows(sample)
        self._file.write(csv_text(lines))  # whole lines, one write: a kill leaves no half row
        self._file.flush()
        self._whole_size = os.fstat(self._file.fileno()).st_size
        self.rows_written += len(lines)
        if time.monotonic() - last_sync >= self.interval:
            os.fsync(self._file.fileno())
            return time.monotonic()
        return last_sync

    def _write(self) -> None:
        last_sync = time.monotonic()
        while True:
            sample = self._queue.get()
            if sample is None:
                break
            if not self._due(sample):
                continue
            try:
                last_sync = self._write_sample(sample, last_sync)
            except Exception as error:  # disk full, file gone, odd sample: the log ends, never the sampler
                self.error = _reason(error)
                break
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except (OSError, ValueError):
            pass
        try:
            self._file.close()
        except OSError:
            pass  # closing flushes what a full disk refused again
        if self.error is not None:
            self._cut_partial_row()
            self._release()
            self._drain()
            self._tell(self.stopped_line())

    def _cut_partial_row(self) -> None:
        """A full disk takes what fits of a row: the file is cut back to its last whole row, so a reader of the
        CSV never meets a half line."""
        try:
            if os.path.isfile(self.path) and os.path.getsize(self.path) > self._whole_size:
                os.truncate(self.path, self._whole_size)
        except OSError:
            log.warning("gpumem: cutting a half-written row from %s failed", self.path, exc_info=True)

    def _drain(self) -> None:
        """Drop the samples queued before the listener went: nobody will write them."""
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass

    def _tell(self, line: str) -> None:
        try:
            self._on_stopped(line)
        except Exception:
            log.warning("gpumem: telling that the memory log stopped failed", exc_info=True)

    # --- lifecycle -------------------------------------------------------------------------------

    def _release(self) -> None:
        """Give the sampler back as it was: no listener, its own interval (unless the panel changed it
        meanwhile), our own sampler stopped. Once, from whichever of stop() and a failed write comes first."""
        with self._release_lock:
            if self._released:
                return
            self._released = True
        self._sampler.remove_listener(self._on_sample)
        if self._own_sampler:
            self._sampler.stop()
        elif self._restore_interval is not None and self._sampler.interval == self.interval:
            self._sampler.configure(interval=self._restore_interval)
            self.restored_interval = self._restore_interval

    @property
    def running(self) -> bool:
        return not self._stopped and self._writer.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop logging: the rows so far are written and synced, the file closed."""
        if self._stopped:
            return
        self._stopped = True
        self._release()
        self._queue.put(None)
        self._writer.join(timeout)

    def stopped_line(self) -> str:
        """The one line a failed write gets: where, why, how many rows, and the sampler's interval back."""
        line = f"gpumem log: stopped logging to {self.path} after {self.rows_written} rows: {self.error}"
        if self.restored_interval is not None:
            line += f"; sampling is back to every {self.restored_interval:g} s"
        return line

    def status(self) -> str:
        """One line: where, how often, how many rows (or why it stopped)."""
        state = "logging" if self.running else "stopped logging"
        line = f"{state} GPU memory to {self.path} every {self.interval:g} s: {self.rows_written} rows"
        if self.error:
            line += f"; stopped by an error: {self.error}"
        return line

    def __enter__(self) -> "MemoryLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<MemoryLog {self.status()}>"


def log_gpu_memory(path: str, interval: float = 1.0) -> MemoryLog:
    """Append a CSV row per sample (and per device) to `path` every `interval` seconds until `.stop()`:
    time (ISO and epoch), device, used, total, this kernel's allocated/reserved/peak, utilisation, host RSS
    (an empty cell where a figure is not measured). An existing file is appended to when its header matches.
    Raises ValueError with one line for a bad path or interval; a write that fails later (a full disk) stops
    the log and prints one line on stderr."""
    return MemoryLog(path, interval)
