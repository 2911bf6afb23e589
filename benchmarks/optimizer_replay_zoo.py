"""Issue 25, robustness of the replayed optimizer steps (analysis.trace.optimizer_replay) on the models users run: every
model of the zoo (benchmarks/zoo, whose packages are installed) planned for a T4, once as shipped (the search's
traces replay the first trace's AdamW steps) and once with every step run; the curve (each traced batch and its
peak), the maximum and the peak reserved must be the same, and the seconds of each are kept.

    PYTHONPATH=. .venv/bin/python benchmarks/optimizer_replay_zoo.py [--only NAME,NAME]   (about 35 min on 2 cores)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import write_result  # noqa: E402

TARGET = "T4"


def _plan(entry: Any, model: Any, replay: bool) -> Dict[str, Any]:
    from gpumem_kernel.analysis import analyze

    started = time.perf_counter()
    try:
        report = analyze(
            model, batch_size=entry.batch, input=entry.input, loss=entry.loss, target=TARGET, replay_optimizer=replay
        )
    except Exception as error:  # recorded: the same error both ways is the same answer
        return {"error": str(error).strip().splitlines()[0][:200], "seconds": round(time.perf_counter() - started, 2)}
    return {
        "curve": [[p.batch_size, p.peak_bytes] for p in report.curve],
        "maximum": report.recommendations.maximum,
        "peak_reserved_bytes": report.peak_reserved_bytes,
        "seconds": round(time.perf_counter() - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated zoo names (default: every installed entry)")
    args = parser.parse_args()
    from benchmarks.zoo.definition import by_name
    from benchmarks.zoo.packages import missing

    wanted = {n for n in args.only.split(",") if n}
    rows: List[Dict[str, Any]] = []
    for name, entry in by_name().items():
        if (wanted and name not in wanted) or missing(entry.package):
            continue
        try:
            model = entry.build()
        except Exception as error:  # the zoo's own failure, not the analysis's
            rows.append({"name": name, "build_error": str(error).splitlines()[0][:200]})
            continue
        replayed, run = _plan(entry, model, True), _plan(entry, model, False)
        same = {k: v for k, v in replayed.items() if k != "seconds"} == {k: v for k, v in run.items() if k != "seconds"}
        rows.append({"name": name, "same": same, "replayed": replayed, "run": run})
        print(name, same, replayed.get("seconds"), run.get("seconds"), flush=True)
    compared = [r for r in rows if "same" in r]
    write_result(
        "optimizer_replay_zoo",
        {
            "target": TARGET,
            "models": len(compared),
            "same": sum(r["same"] for r in compared),
            "seconds_replayed": round(sum(r["replayed"]["seconds"] for r in compared), 1),
            "seconds_run": round(sum(r["run"]["seconds"] for r in compared), 1),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
