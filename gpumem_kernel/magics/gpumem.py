"""`%gpumem` line magic and `%%gpumem` cell magic: a thin dispatcher over the Python API; bad input is one
UsageError line. The analysis commands live in magics.analysis (analyze, recommend), magics.autobatch and
magics.benchmark, their options in magics.options."""

from __future__ import annotations

import contextlib
import html
import json
import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display

from gpumem_kernel.magics import argcheck
from gpumem_kernel.clear import reclaim as clearing
from gpumem_kernel.magics import analysis as magics_analysis
from gpumem_kernel.magics import autobatch as magics_autobatch
from gpumem_kernel.magics import benchmark as magics_benchmark
from gpumem_kernel.magics import holders as magics_holders
from gpumem_kernel.magics import memlog as magics_log
from gpumem_kernel.magics import watch as magics_watch
from gpumem_kernel.oom import handler as oom_handler
from gpumem_kernel.magics import options as magics_options
from gpumem_kernel.magics.parsing import usage_error
from gpumem_kernel.magics.parsing import parse as _parse
from gpumem_kernel.probe import snapshot
from gpumem_kernel.probe.power import DeviceEnergy, span_energy
from gpumem_kernel.probe.torchstats import cuda_initialised, loaded_torch
from gpumem_kernel.render.status import status_bundle
from gpumem_kernel.render.text import one_line, shown
from gpumem_kernel.magics.status import get_status
from gpumem_kernel.timeline.recorded import DEFAULT_MAX_ENTRIES, TimelineRecorder

NO_OOM = "no CUDA out-of-memory error in this kernel yet"
_HELP_FLAGS = ("--help", "-h")


@magic_arguments("gpumem status")
@argument("--json", action="store_true", help="print the raw sample as JSON instead of a table")
def _status_arguments(line: str) -> None:
    """GPU memory of every device, its processes, and host memory, now."""


@magic_arguments("gpumem clear")
@argument("--vars", nargs="+", default=[], metavar="NAME", help="also delete these variables")
@argument("--all-cuda-vars", action="store_true", help="also delete every variable that holds CUDA memory")
@argument("--list", action="store_true", help="dry run: show what would be dropped, change nothing")
def _clear_arguments(line: str) -> None:
    """Free what pins memory (the last error's traceback, cached outputs holding tensors), gc.collect(), and
    empty the CUDA cache when CUDA is initialised; then list what still holds memory. Variables are deleted
    only when named."""


@magic_arguments("gpumem oom")
def _oom_arguments(line: str) -> None:
    """Show the checklist of the last CUDA out-of-memory error in this kernel again."""


def status(shell: Any, rest: str) -> None:
    args = _parse(_status_arguments, "status", rest)
    sample = get_status()
    if args.json:
        print(json.dumps(sample, indent=2))
    else:
        display(status_bundle(sample), raw=True)


def clear(shell: Any, rest: str) -> None:
    args = _parse(_clear_arguments, "clear", rest)
    try:
        report = clearing.clear_gpu_memory(
            shell, variables=args.vars, all_cuda_vars=args.all_cuda_vars, dry_run=args.list
        )
    except ValueError as error:  # an unknown or IPython-owned variable name
        raise usage_error("clear", str(error)) from None
    display(clearing.clear_bundle(report), raw=True)


def oom(shell: Any, rest: str) -> None:
    _parse(_oom_arguments, "oom", rest)
    bundle = oom_handler.last_oom_bundle(shell)
    if bundle is None:
        print(NO_OOM)
    else:
        display(bundle, raw=True)


@dataclass(frozen=True)
class Command:
    run: Callable[[Any, str], None]  # (shell, the rest of the line), or (kernel, ...) with `kernel`
    spec: Callable[..., Any]  # its magic_arguments function: the parser and --help text
    kernel: bool = False  # run gets the loaded Kernel (extension.Kernel), whose parts it uses, not the shell


COMMANDS: Dict[str, Command] = {
    "status": Command(status, _status_arguments),
    "clear": Command(clear, _clear_arguments),
    "oom": Command(oom, _oom_arguments),
    "analyze": Command(magics_analysis.analyze, magics_options.analyze_arguments),
    "recommend": Command(magics_analysis.recommend, magics_options.recommend_arguments),
    "autobatch": Command(magics_autobatch.autobatch, magics_options.autobatch_arguments),
    "benchmark": Command(magics_benchmark.benchmark, magics_options.benchmark_arguments),
    "log": Command(magics_log.log, magics_log.log_arguments, kernel=True),
    "holders": Command(magics_holders.holders, magics_holders.holders_arguments),
    "watch": Command(magics_watch.watch, magics_watch.watch_arguments),
}
USAGE = f"usage: %gpumem {{{','.join(COMMANDS)}}} [options]   (%gpumem --help, %gpumem COMMAND --help)"


def help_text(command: Command) -> str:
    """The parser's help, as argparse would print it, without IPython's reST markup (`::`, a doubled `%`)."""
    lines = (command.spec.__doc__ or "").strip().splitlines()
    if lines and lines[0].strip() == "::":
        lines = lines[1:]
    text = "\n".join(lines).strip()
    return "usage: " + (text[1:] if text.startswith("%%") else text)


def _summary(command: Command) -> str:
    """The usage line; a long one (argparse wraps it) shortened to `%gpumem NAME POSITIONALS [options]`."""
    usage = " ".join(help_text(command).split("\n\n")[0][len("usage: ") :].split())
    if len(usage) <= 100:
        return usage
    parser = command.spec.parser
    positionals = [action.metavar or action.dest for action in parser._actions if not action.option_strings]
    return " ".join([f"%{parser.prog}", *positionals, "[options]"])


def overview() -> str:
    """`%gpumem --help`: one usage line per command."""
    lines = ["GPU memory of this kernel. Commands:"]
    lines += [f"  {_summary(command)}" for command in COMMANDS.values()]
    usage = " ".join(cell_help().split("\n\n")[0][len("usage: ") :].split())
    lines.append(f"  {usage}   (cell magic: the cell's peak, delta and energy, or its memory timeline)")
    lines.append("%gpumem COMMAND --help shows a command's options.")
    return "\n".join(lines)


# --- %%gpumem: the cell's peak and delta ---------------------------------------------------------------------


@magic_arguments("%gpumem")
@argument(
    "--device",
    metavar="N",
    type=argcheck.device(argcheck.INDEX),
    help="CUDA device to report: N or cuda:N (default: every device CUDA uses; --timeline: the current one)",
)
@argument(
    "--timeline",
    action="store_true",
    help="record the cell's CUDA allocations (PyTorch's allocator history, Python stacks) and show the memory "
    "timeline after it: what was alive when, and which line allocated it. Needs CUDA already in use",
)
@argument(
    "--max-entries",
    metavar="N",
    type=argcheck.count,
    default=DEFAULT_MAX_ENTRIES,
    help=f"--timeline: keep at most the last N allocator events (default {DEFAULT_MAX_ENTRIES:,}; "
    "about 2 µs each to record, several KB each to keep)",
)
def _cell_arguments(line: str) -> None:
    """Run the cell and report its peak and delta of GPU memory (allocated and reserved, per device) when
    CUDA is initialised in this kernel (before or by the cell); otherwise the host RSS delta, and says so.
    Never initialises CUDA itself. The peak is since the cell started (the device's peak counter is reset).
    Each GPU CUDA sees also gets the cell's energy (Wh) and mean power, from NVML (the whole GPU, every process
    on it): its energy counter, or power readings × time where the GPU has none (before Volta), and says so.
    With --timeline, records the cell's allocations instead and shows its memory timeline (the cell's own
    error still fails the cell, and the timeline of what ran is shown after its traceback)."""


def cell_help() -> str:
    """`%%gpumem --help` (help_text drops one `%` of the prog's doubled one)."""
    return "usage: %" + help_text(Command(lambda shell, rest: None, _cell_arguments))[len("usage: ") :]


def _cuda_torch() -> Any:
    """torch, when it is imported and CUDA is initialised in this kernel; else None (never initialises it)."""
    return loaded_torch() if cuda_initialised() else None


@dataclass
class CellReport:
    devices: List[Any]  # analysis.MonitorResult per CUDA device, or one "host" result
    rss_delta: int
    seconds: float
    error: bool  # the cell raised
    energy: List[DeviceEnergy] = field(default_factory=list)  # per GPU CUDA sees (NVML, whole device)


def _cell_energy(start: Optional[Dict[str, Any]], device: Optional[int]) -> List[DeviceEnergy]:
    """Energy of each GPU since `start` (a sample), with the sampler's samples between for power × time."""
    end = snapshot.take_sample()
    if start is None or end is None:
        return []
    sampler = snapshot.running_sampler()
    history = sampler.history() if sampler is not None else []
    between = [s for s in history if start["time"] < s["time"] < end["time"]]
    return span_energy(start, between, end, device)


def monitor_cell(shell: Any, cell: str, device: Optional[int] = None) -> CellReport:
    """Run `cell` inside MemoryMonitor (one per CUDA device in use, or the host) and collect the figures."""
    import psutil

    from gpumem_kernel.probe.monitor import MemoryMonitor, MonitorResult

    torch = _cuda_torch()
    if device is not None:
        indices = [device]
    elif torch is not None:
        indices = [i for i in range(torch.cuda.device_count()) if torch.cuda.memory_reserved(i) > 0]
        indices = indices or [torch.cuda.current_device()]
    else:
        indices = [0]
    monitors = [MemoryMonitor(i, reset=True, printer=None) for i in indices]
    process = psutil.Process()
    power_start = snapshot.take_sample()  # NVML only: energy and power never need a CUDA context
    rss_before, started = process.memory_info().rss, time.perf_counter()
    with contextlib.ExitStack() as stack:
        for monitor in monitors:
            stack.enter_context(monitor)
        outcome = run_nested_cell(shell, cell)
    seconds, rss_delta = time.perf_counter() - started, process.memory_info().rss - rss_before
    energy = _cell_energy(power_start, device)
    results = [m.result for m in monitors if m.result is not None]
    after = _cuda_torch()
    if after is not None and torch is None and device is None:  # the cell initialised CUDA: every device it used
        for i in range(after.cuda.device_count()):
            if i not in indices and after.cuda.memory_reserved(i) > 0:
                results.append(
                    MonitorResult(
                        f"cuda:{i}",
                        after.cuda.max_memory_allocated(i),
                        after.cuda.memory_allocated(i),
                        after.cuda.memory_reserved(i),
                        "",
                    )
                )
        used = [r for r in results if r.reserved_bytes]
        results = used or results[:1]
    if any(r.device == "host" for r in results):
        results = [r for r in results if r.device == "host"][:1]
    return CellReport(results, rss_delta, seconds, not getattr(outcome, "success", True), energy)


def run_nested_cell(shell: Any, cell: str) -> Any:
    """Run `cell` from inside a cell magic, as IPython runs a cell (its own traceback shown once, by IPython),
    and let a failure fail the enclosing cell too: its ExecutionResult gets the error, so the execute_reply
    says "error" with the user's exception and traceback and Run All stops there. Raising it again instead
    would print the traceback a second time, with the magic's frames on top."""
    hook = getattr(shell, "displayhook", None)
    outer = getattr(hook, "exec_result", None)  # the enclosing cell's ExecutionResult, while it runs
    result = shell.run_cell(cell)
    if outer is not None:
        hook.exec_result = outer  # the nested run_cell reset it, but the enclosing cell is still running
        if outer.error_before_exec is None and outer.error_in_exec is None:
            outer.error_before_exec = getattr(result, "error_before_exec", None)
            outer.error_in_exec = getattr(result, "error_in_exec", None)
    return result


def _signed(n: Optional[int]) -> str:
    from gpumem_kernel.render.units import format_bytes

    return "n/a" if n is None else ("+" if n >= 0 else "-") + format_bytes(abs(n), "auto")


def cell_bundle(report: CellReport) -> Dict[str, str]:
    """text/plain and text/html of a %%gpumem report."""
    from gpumem_kernel.render.units import format_bytes

    head = f"%%gpumem: the cell ran in {report.seconds:.2f} s" + (" (it raised an error)" if report.error else "")
    rows: List[List[str]] = []  # device, peak, delta, reserved, note
    for r in report.devices:
        if r.device != "host":
            rows.append(
                [
                    r.device,
                    _signed(r.peak_bytes),
                    _signed(r.delta_bytes),
                    format_bytes(r.reserved_bytes, "auto"),
                    r.note or "allocated by PyTorch: peak over the cell's start, delta at its end",
                ]
            )
    host_note = "CUDA is not initialised in this kernel: host memory only" if not rows else "host RSS of this process"
    rows.append(["host RSS", "", _signed(report.rss_delta), "", host_note])
    text = [head]
    for device, peak, delta, reserved, note in rows:
        if device == "host RSS":
            text.append(f"  {device:<8} delta {delta} ({note})")
        else:
            text.append(f"  {device:<8} peak {peak}, delta {delta}, reserved {reserved} ({note})")
    energy = energy_rows(report.energy)
    text += [f"  {device:<8} energy {wh}, mean power {watts} ({note})" for device, wh, watts, note in energy]
    return {
        "text/plain": "\n".join(text),
        "text/html": f"<div class='gpumem-cell'><p>{html.escape(head)}</p>"
        + _html_table(("device", "peak", "delta", "reserved", "note"), rows)
        + (_html_table(("device", "energy", "mean power", "note"), energy) if energy else "")
        + "</div>",
    }


def _html_table(heads: Sequence[str], rows: List[List[str]]) -> str:
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def energy_rows(energies: Sequence[DeviceEnergy]) -> List[List[str]]:
    """device, energy (Wh), mean power, note: one row per GPU CUDA sees (NVML: the whole GPU, every process)."""
    from gpumem_kernel.render.units import format_watt_hours, format_watts

    rows = []
    for item in energies:
        energy = item.energy
        if energy.joules is None:
            rows.append([item.device, "n/a", "n/a", f"not measured: {item.reason or 'unknown'}"])
            continue
        note = "NVML, the whole GPU: every process on it" + (f"; {energy.note}" if energy.note else "")
        rows.append([item.device, format_watt_hours(energy.joules), format_watts(energy.mean_watts), note])
    return rows


def run_cell_magic(shell: Any, line: str, cell: str) -> None:
    if _wants_help(line):
        print(cell_help())
        return
    args = _parse(_cell_arguments, "cell", line)
    if args.timeline:
        timeline_cell(shell, cell, argcheck.device_index(args.device), args.max_entries)
        return
    display(cell_bundle(monitor_cell(shell, cell, argcheck.device_index(args.device))), raw=True)


def timeline_cell(shell: Any, cell: str, device: Optional[int], max_entries: int) -> Optional[TimelineRecorder]:
    """`%%gpumem --timeline`: run the cell under the recorder, then show its timeline (also when the cell
    failed: its traceback comes first, from IPython, and the cell still fails). Without CUDA in use: one line,
    and the cell runs as it would."""
    count = getattr(shell, "execution_count", None)
    title = f"In [{count}]" if isinstance(count, int) else "the cell"
    recorder = TimelineRecorder(device=device, max_entries=max_entries, title=title, printer=print)
    with recorder:
        run_nested_cell(shell, cell)
    bundle = recorder.bundle()
    if bundle is not None:
        display(bundle, raw=True)
    return recorder


def _wants_help(rest: str) -> bool:
    try:
        return any(word in _HELP_FLAGS for word in shlex.split(rest))
    except ValueError:
        return False  # unbalanced quotes: the parser reports them


@magics_class
class GpumemMagics(Magics):
    def __init__(self, shell: Any, kernel: magics_log.Logging) -> None:
        super().__init__(shell)
        self.kernel = kernel  # extension.Kernel: the running parts the commands share (the memory log)

    @line_cell_magic
    def gpumem(self, line: str, cell: Optional[str] = None) -> None:
        """GPU memory of this kernel. Commands: status; clear; oom; analyze MODEL; recommend MODEL; autobatch
        MODEL; benchmark MODEL; log; holders; watch. `%gpumem --help` lists them, `%gpumem COMMAND --help` explains one.
        `%%gpumem [--device N]` runs the cell and reports its peak, delta and energy."""
        if cell is not None:
            run_cell_magic(self.shell, line, cell)
            return
        words = line.strip().split(None, 1)
        if not words:
            print(USAGE)
            return
        if words[0] in _HELP_FLAGS:
            print(overview())
            return
        command = COMMANDS.get(words[0])
        if command is None:
            raise UsageError(one_line(f"gpumem: unknown command {shown(words[0])}; try: {', '.join(COMMANDS)}"))
        rest = words[1] if len(words) > 1 else ""
        if _wants_help(rest):
            print(help_text(command))
            return
        command.run(self.kernel if command.kernel else self.shell, rest)
