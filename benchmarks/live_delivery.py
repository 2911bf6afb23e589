"""Issue 6, row 2: share of samples a comm client receives while a cell keeps the kernel busy.

A real ipykernel is started and driven as JupyterLab drives it (tests/kernel_harness.py: bootstrap by silent
execute, a `gpumem` comm opened at 1 Hz, iopub read on a thread). A cell then runs `--seconds` of (a) a
pure-Python busy loop and (b) a torch CPU training loop (an MLP, torch's default threads). Samples whose
iopub message arrives between the cell's execute_input and its idle status are counted against
duration / interval (rounded down). The largest gap between consecutive arrivals during the cell shows whether
they came live or in a burst at the end.

    PYTHONPATH=. .venv/bin/python benchmarks/live_delivery.py [--seconds 60] [--kernel-python /path/to/python ...]

The kernel of this Python always runs; each --kernel-python adds one (e.g. a venv with ipykernel 6); the
ipykernel version recorded is the one the kernel reports in its hello message.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from _common import write_result  # noqa: E402
from kernel_harness import KernelHarness  # noqa: E402

SETUP = {
    "busy": "",
    "torch": """
import torch as _torch
from torch import nn as _nn
_torch.manual_seed(0)
_model = _nn.Sequential(_nn.Linear(256, 512), _nn.ReLU(), _nn.Linear(512, 512), _nn.ReLU(), _nn.Linear(512, 10))
_opt = _torch.optim.SGD(_model.parameters(), lr=1e-3, momentum=0.9)
_x, _y = _torch.randn(64, 256), _torch.randint(0, 10, (64,))
""",
}

LOOP = {
    "busy": """
import time as _time
_end, _steps = _time.monotonic() + {seconds}, 0
while _time.monotonic() < _end:
    _acc = 0
    for _i in range(10000):
        _acc += _i * _i
    _steps += 1
""",
    "torch": """
import time as _time
_end, _steps = _time.monotonic() + {seconds}, 0
while _time.monotonic() < _end:
    _opt.zero_grad(set_to_none=True)
    _nn.functional.cross_entropy(_model(_x), _y).backward()
    _opt.step()
    _steps += 1
""",
}

DESCRIBE = {
    "busy": "pure-Python busy loop (holds the GIL except at the interpreter's switch interval)",
    "torch": "torch CPU training loop (MLP 256-512-512-10, batch 64, SGD momentum, default torch threads)",
}


def measure_loop(kernel: KernelHarness, comm: str, loop: str, seconds: float, interval: float) -> Dict[str, Any]:
    if SETUP[loop]:
        kernel.execute(SETUP[loop])
    reply = kernel.execute(LOOP[loop].format(seconds=seconds), timeout=seconds + 120)
    if reply["status"] != "ok":
        raise RuntimeError(f"{loop} cell failed: {reply.get('ename')}: {reply.get('evalue')}")
    msg_id = reply["msg_id"]
    messages = kernel.messages()
    started = next(r.at for r in messages if r.msg_type == "execute_input" and r.parent_id == msg_id)
    finished = next(
        r.at
        for r in messages
        if r.msg_type == "status" and r.parent_id == msg_id and r.content["execution_state"] == "idle"
    )
    during = [r for r in kernel.comm_messages(comm, "sample") if started <= r.at <= finished]
    duration = finished - started
    expected = math.floor(duration / interval)
    arrivals = [started] + [r.at for r in during] + [finished]
    seqs = [r.comm_data(comm)["seq"] for r in during]
    missing = sum(b - a - 1 for a, b in zip(seqs, seqs[1:]) if b > a + 1)
    return {
        "loop": loop,
        "description": DESCRIBE[loop],
        "cell_seconds": round(duration, 3),
        "interval_s": interval,
        "expected": expected,
        "delivered": len(during),
        "share": len(during) / expected if expected else None,
        "max_gap_s": round(max(b - a for a, b in zip(arrivals, arrivals[1:])), 3),
        "seq_missing": missing,
        "steps": kernel.evaluate("_steps"),
    }


def measure_kernel(python: str, seconds: float, interval: float, loops: List[str]) -> List[Dict[str, Any]]:
    entries: List[Dict[str, Any]] = []
    with KernelHarness(python=python) as kernel:
        kernel.bootstrap()
        comm = kernel.open_comm({"type": "open", "protocol": 1, "interval": interval, "client": "benchmark"})
        hello = kernel.wait_comm(comm, "hello")
        kernel.wait_comm(comm, "sample", timeout=10 + 2 * interval)
        base = {"kernel_python": python, "ipykernel": hello.get("ipykernel"), "python": hello.get("python")}
        has_torch = kernel.evaluate("__import__('importlib.util').util.find_spec('torch') is not None")
        for loop in loops:
            if loop == "torch" and not has_torch:
                entries.append(
                    {
                        **base,
                        "loop": loop,
                        "description": DESCRIBE[loop],
                        "not_measured": "torch is not installed in this kernel's Python",
                    }
                )
                print(f"ipykernel {base['ipykernel']} {loop}: not measured (no torch)", flush=True)
                continue
            result = {**base, **measure_loop(kernel, comm, loop, seconds, interval)}
            entries.append(result)
            print(
                f"ipykernel {base['ipykernel']} {loop}: {result['delivered']}/{result['expected']} samples "
                f"({result['share']:.1%}), max gap {result['max_gap_s']} s, {result['steps']} steps",
                flush=True,
            )
        kernel.close_comm(comm)
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each busy cell")
    parser.add_argument("--interval", type=float, default=1.0, help="sampling interval asked for on open")
    parser.add_argument(
        "--kernel-python",
        action="append",
        default=[],
        help="another kernel Python to measure (repeatable), e.g. a venv with ipykernel 6",
    )
    parser.add_argument("--loops", default="busy,torch")
    args = parser.parse_args()
    loops = [name.strip() for name in args.loops.split(",") if name.strip()]
    unknown = sorted(set(loops) - set(LOOP))
    if unknown:
        parser.error(f"unknown loop(s) {', '.join(unknown)}; choose from {', '.join(LOOP)}")

    entries: List[Dict[str, Any]] = []
    for python in [sys.executable, *args.kernel_python]:
        try:
            entries += measure_kernel(python, args.seconds, args.interval, loops)
        except Exception as exc:  # record why a kernel could not be measured instead of losing the others
            entries.append({"kernel_python": python, "not_measured": f"{type(exc).__name__}: {exc}"})
            print(f"{python}: not measured ({type(exc).__name__}: {exc})", flush=True)
    measured = [e["share"] for e in entries if e.get("share") is not None]
    write_result(
        "live_delivery",
        {
            "description": "samples received by a comm client between a busy cell's execute_input and its idle "
            "status, against cell duration / interval",
            "seconds": args.seconds,
            "interval_s": args.interval,
            "entries": entries,
            "target": {"share_min": 0.95, "met": bool(measured) and min(measured) >= 0.95},
        },
    )


if __name__ == "__main__":
    main()
