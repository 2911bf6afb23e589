"""The GPU suite's one command: every section as its own process, within one time budget, then a summary.

    python3 -m benchmarks.gpu --out DIR            # NVIDIA GPU + CUDA torch; default DIR: benchmarks/results
    python3 -m benchmarks.gpu --dry-run [--out DIR]  # CPU stand-ins; default DIR: a new temporary folder
    python3 -m benchmarks.gpu --pytest --out DIR   # then `pytest -m gpu`, against a finished run's files

Sections (a crash or a hang in one never costs the others their results): sampler; estimator and kernel in
parallel (the kernel checks never touch the GPU in a way that changes the estimator's per-process
truths); distributed, llm (LitGPT's LoRA steps), residue (the estimator's misses, recorded) and advice (the
fit advice's levers as real steps) in parallel;
autobatch (alone: it fills the GPU with a ballast); timeline (alone: it times a loop and provokes an OOM).
A dry run starts all nine at once.
Each writes <DIR>/gpu_<section>.json; the runner writes gpu_suite.json (plan, per-section status, the summary
rows) and gpu_suite.log.
Kernel packages missing from the GPU image (ipykernel, jupyter_client, ...), and what `pytest -m gpu` collects
beside them (jsonschema, jupyter_server, ...), are installed from the wheels in .whl/
(scripts/prepare_gpu_wheels.sh) into /tmp/gpumem-site, without any network.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, TextIO, Tuple

from benchmarks.gpu import summary
from benchmarks.gpu.common import REPO, Context, NvmlTruth, write_result


@dataclass(frozen=True)
class Section:
    module: str
    gpu_s: float  # planned seconds on an H100
    dry_s: float  # the dry run's cap: all five share two (often loaded) cores; ~1 min in all when idle

    def seconds(self, dry: bool) -> float:
        return self.dry_s if dry else self.gpu_s


SECTIONS: Dict[str, Section] = {
    "sampler": Section("benchmarks.gpu.sampler_gpu", 45, 120),
    "estimator": Section("benchmarks.gpu.estimator", 230, 150),
    "kernel": Section("benchmarks.gpu.kernel_checks", 110, 120),
    "distributed": Section("benchmarks.gpu.distributed", 45, 120),
    "llm": Section("benchmarks.gpu.llm_gpu", 75, 150),
    "residue": Section("benchmarks.gpu.residue_gpu", 60, 120),
    "advice": Section("benchmarks.gpu.advice_gpu", 90, 150),
    "autobatch": Section("benchmarks.gpu.autobatch_cmp", 150, 150),
    "timeline": Section("benchmarks.gpu.timeline_gpu", 70, 150),
}
# timeline alone: its recording-cost rounds time a training loop, and its OOM fills the GPU
# llm, residue and advice beside distributed: none times a loop, and together they hold under 50 GiB of the GPU
PHASES: List[List[str]] = [
    ["sampler"],
    ["estimator", "kernel"],
    ["distributed", "llm", "residue", "advice"],
    ["autobatch"],
    ["timeline"],
]
DRY_PHASES: List[List[str]] = [list(SECTIONS)]  # no timing or GPU memory to protect: all at once
BUDGET_S = 560.0  # one 10-minute command, less the machine's start-up and the runner's own work
GRACE_S = 20.0  # after a section's budget, before it is killed (it stops measuring at its budget)
# what the sections' kernels and `pytest -m gpu` import that the GPU image lacks: any missing, .whl is installed
NEEDED_MODULES = (
    "ipykernel",
    "jupyter_client",
    "comm",
    "zmq",
    "IPython",
    "jsonschema",
    "jupyter_server",
    "nbformat",
    "anywidget",
)
WHEELS = REPO / ".whl"
SITE = Path("/tmp/gpumem-site")
# built by scripts/setup.sh and git-ignored, so a copy of the tracked tree lacks them unless they are carried:
# without the watch's front end `%gpumem watch` shows its static table, and the watch's gpu test fails
BUILT = ("gpumem_kernel/watchwidget/static",)


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="run the harness on the CPU with stand-ins")
    parser.add_argument("--out", type=Path, help="folder for the result files")
    parser.add_argument("--only", default="", help=f"comma-separated sections of: {', '.join(SECTIONS)}")
    parser.add_argument("--budget", type=float, help=f"seconds for the whole run (default {BUDGET_S:g} on a GPU)")
    parser.add_argument(
        "--pytest",
        action="store_true",
        help="instead of the sections, run `pytest -m gpu` (with the wheels' packages) against --results",
    )
    parser.add_argument(
        "--results",
        type=Path,
        help="a finished GPU run's folder for --pytest (default: benchmarks/results when it holds one; "
        "without one, the suite's tests run the suite themselves, ~9 minutes)",
    )
    return parser.parse_args(argv)


# --- preparation ----------------------------------------------------------------------------------------------


def missing_modules() -> List[str]:
    return [m for m in NEEDED_MODULES if importlib.util.find_spec(m) is None]


def install_wheels(log: "Log") -> Optional[str]:
    """pip install the prepared wheels into SITE (offline); the PYTHONPATH entry, or None if there are none."""
    wheels = sorted(str(p) for p in WHEELS.glob("*.whl"))
    if not wheels:
        log.say(f"no wheels in {WHEELS}: run scripts/prepare_gpu_wheels.sh where pip reaches the registry")
        return None
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-index",
        "--no-deps",
        "--no-compile",
        "--no-cache-dir",
        "--upgrade",
        "--target",
        str(SITE),
        *wheels,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    log.say(f"installed {len(wheels)} wheels into {SITE}: exit {done.returncode} {done.stderr.strip()[-500:]}")
    return str(SITE) if done.returncode == 0 else None


def missing_built() -> List[str]:
    return [path for path in BUILT if not (REPO / path).is_dir() or not any((REPO / path).iterdir())]


def environment(log: "Log") -> Tuple[Dict[str, str], Dict[str, Any]]:
    """The sections' environment, and what the preparation found and did."""
    extra: List[str] = []
    missing = missing_modules()
    facts: Dict[str, Any] = {"modules_missing": missing, "built_missing": missing_built()}
    for path in facts["built_missing"]:
        log.say(f"missing here: {path} (built by scripts/setup.sh, git-ignored): carry it with the tree")
    if missing:  # a dry run too: that rehearses the GPU machine's install (scripts/rehearse_gpu_image.sh)
        site = install_wheels(log)
        if site:
            extra.append(site)
            sys.path.insert(0, site)
            importlib.invalidate_caches()
            facts["installed_from_wheels"] = True
            facts["modules_missing_after"] = missing_modules()
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(REPO), *extra, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    return env, facts


# --- running the sections ------------------------------------------------------------------------------------------


class Log:
    """Everything the run prints, to the terminal and to <out>/gpu_suite.log."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a")
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        with self._lock:
            print(text, flush=True)
            self._file.write(text + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


def _pump(name: str, proc: subprocess.Popen, log: Log) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        log.say(f"[{name}] {line.rstrip()}")


def run_phase(
    names: List[str],
    seconds: Dict[str, float],
    args: argparse.Namespace,
    out: Path,
    env: Dict[str, str],
    log: Log,
    command: str,
) -> Dict[str, Dict[str, Any]]:
    started = time.monotonic()
    running = {}
    for name in names:
        cmd = [
            sys.executable,
            "-m",
            SECTIONS[name].module,
            "--out",
            str(out),
            "--seconds",
            f"{seconds[name]:.0f}",
            "--command",
            command,
        ] + (["--dry-run"] if args.dry_run else [])
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        pump = threading.Thread(target=_pump, args=(name, proc, log), daemon=True)
        pump.start()
        running[name] = (proc, pump)
        log.say(f"== {name}: started, budget {seconds[name]:.0f} s")
    status = {}
    for name, (proc, pump) in running.items():
        left = seconds[name] + GRACE_S - (time.monotonic() - started)
        try:
            code: Optional[int] = proc.wait(timeout=max(1.0, left))
            state = "ok" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            proc.kill()
            code, state = proc.wait(), "timed out"
        pump.join(5)
        status[name] = {
            "status": state,
            "returncode": code,
            "budget_s": round(seconds[name]),
            "seconds": round(time.monotonic() - started, 1),
        }
        log.say(f"== {name}: {state} after {status[name]['seconds']} s")
    return status


def plan(selected: List[str], dry: bool, budget: float) -> List[Tuple[List[str], Dict[str, float]]]:
    """Phases with each section's seconds, scaled down together when the budget is smaller than the plan."""
    phases = [[n for n in phase if n in selected] for phase in (DRY_PHASES if dry else PHASES)]
    phases = [p for p in phases if p]
    planned = sum(max(SECTIONS[n].seconds(dry) for n in p) for p in phases)
    scale = min(1.0, budget / planned) if planned else 1.0
    return [(p, {n: SECTIONS[n].seconds(dry) * scale for n in p}) for p in phases]


def finished_run(folder: Path) -> bool:
    """Whether `folder` holds a GPU run's summary (not a dry run's)."""
    try:
        return json.loads((folder / "gpu_suite.json").read_text()).get("dry_run") is False
    except (OSError, ValueError):
        return False


def run_pytest(args: argparse.Namespace, out: Path, env: Dict[str, str], log: Log) -> int:
    """`pytest -m gpu` over every test folder, its output in gpu_pytest.log and gpu_pytest.xml."""
    results = args.results or (REPO / "benchmarks" / "results")
    env = dict(env)
    if finished_run(results):
        env["GPUMEM_GPU_RESULTS"] = str(results.resolve())
        log.say(f"== pytest -m gpu against the run in {results}")
    else:
        log.say(f"== pytest -m gpu: no GPU run in {results}, so the suite's tests run the suite themselves")
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-rA"]
    started = time.time()
    proc = subprocess.Popen(
        [*cmd, f"--junitxml={out / 'gpu_pytest.xml'}", "tests"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _pump("pytest", proc, log)
    code = proc.wait()
    # a gpu test may record its figures in benchmarks/results (test_gpu_live.py): bring them back with the log
    written = REPO / "benchmarks" / "results"
    for path in sorted(written.glob("*.json")):
        if path.stat().st_mtime >= started and path.parent.resolve() != out.resolve():
            shutil.copy2(path, out / path.name)
            log.say(f"== {path.name}: written by the tests, copied into {out}")
    return code


def main(argv: Optional[List[str]] = None) -> int:
    args = parse(argv)
    selected = [s.strip() for s in args.only.split(",") if s.strip()] or list(SECTIONS)
    unknown = sorted(set(selected) - set(SECTIONS))
    if unknown:
        print(f"unknown section(s) {', '.join(unknown)}; the sections: {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    default = Path(tempfile.mkdtemp(prefix="gpumem-gpu-dry-")) if args.dry_run else REPO / "benchmarks" / "results"
    out = args.out or default
    out.mkdir(parents=True, exist_ok=True)
    nvml = NvmlTruth()
    if not args.dry_run and not nvml.available:
        print(f"no NVIDIA GPU here ({nvml.reason}): --dry-run checks the harness on the CPU", file=sys.stderr)
        return 2
    log = Log(out / ("gpu_pytest.log" if args.pytest else "gpu_suite.log"))
    command = " ".join(["python3 -m benchmarks.gpu", *(argv if argv is not None else sys.argv[1:])])
    budget = args.budget or (sum(max(SECTIONS[n].dry_s for n in p) for p in DRY_PHASES) if args.dry_run else BUDGET_S)
    started = time.monotonic()
    env, prepared = environment(log)
    if args.pytest:
        code = run_pytest(args, out, env, log)
        log.close()
        return code
    statuses: Dict[str, Dict[str, Any]] = {}
    for names, seconds in plan(selected, args.dry_run, budget - (time.monotonic() - started)):
        statuses.update(run_phase(names, seconds, args, out, env, log, command))
    table = summary.rows(summary.load(out))
    ctx = Context(out, args.dry_run, time.time(), command)
    write_result(
        ctx,
        "gpu_suite",
        {
            "description": "issue 10's GPU suite: per-section status and the summary table",
            "budget_s": budget,
            "seconds": round(time.monotonic() - started, 1),
            "sections": statuses,
            "preparation": prepared,
            "summary": [dict(zip(summary.HEADER, row)) for row in table],
        },
        nvml,
    )
    log.say("\n" + summary.text_table(table))
    log.say(
        f"\n{'DRY RUN (CPU stand-ins, no GPU figure) ' if args.dry_run else ''}results in {out} "
        f"after {time.monotonic() - started:.0f} s"
    )
    log.close()
    return 0 if all(s["status"] == "ok" for s in statuses.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
