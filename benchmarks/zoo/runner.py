"""Run the zoo: per entry, the training-step analysis and the evaluation analysis, each timed.

    PYTHONPATH=. nice -n 10 .venv/bin/python -m benchmarks.zoo [--only NAME,NAME] [--family timm,...]

The extra packages install apart from .venv (see requirements.txt). A full run writes benchmarks/results/zoo.json
(per model: ok, or the stage and the one-line reason; seconds; predicted peaks), entry by entry, so an interrupted
run keeps what it measured; a filtered run only prints its table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

from benchmarks._common import RESULTS, write_result
from benchmarks.zoo.definition import zoo
from benchmarks.zoo.entry import Entry
from benchmarks.zoo.packages import INSTALL, missing

REASON_CHARS = 300


def one_line(error: BaseException) -> str:
    """The error as the analysis states it: its type and its first line; `multiline` says when it had more."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first}"[:REASON_CHARS]


def _analyse(entry: Entry, model: Any, eval_batch: Optional[int]) -> Any:
    from gpumem_kernel.analysis import analyze

    return analyze(model, batch_size=entry.batch, input=entry.input, loss=entry.loss, eval_batch=eval_batch)


def _failure(row: Dict[str, Any], stage: str, error: BaseException) -> Dict[str, Any]:
    row.update(ok=False, stage=stage, reason=one_line(error), multiline="\n" in str(error).strip())
    row["where"] = "".join(traceback.format_tb(error.__traceback__)[-1:]).strip().splitlines()[0]
    return row


def run_entry(entry: Entry) -> Dict[str, Any]:
    """One entry's row: build, the training analysis (train_seconds), then the training and evaluation analysis
    in one call (analyze(eval_batch=): train_eval_seconds)."""
    row: Dict[str, Any] = {"name": entry.name, "family": entry.family, "input": entry.input_text, "size": entry.size}
    row.update(batch=entry.batch, eval_batch=entry.eval_batch)
    absent = missing(entry.package)
    if absent:
        row.update(ok=None, stage="skipped", reason=absent)
        return row
    started = time.perf_counter()
    try:
        model = entry.build()
    except Exception as error:  # a build failure is the zoo's, not the analysis's: recorded as such
        return _failure(row, "build", error)
    row["build_seconds"] = round(time.perf_counter() - started, 2)
    row["parameters"] = sum(p.numel() for p in model.parameters())
    for stage, eval_batch in (("train", None), ("train_eval", entry.eval_batch)):
        started = time.perf_counter()
        try:
            report = _analyse(entry, model, eval_batch)
        except Exception as error:
            return _failure(row, stage, error)
        row[f"{stage}_seconds"] = round(time.perf_counter() - started, 2)
        if stage == "train":
            row.update(peak_reserved_bytes=report.peak_reserved_bytes, peak_bytes=report.peak_bytes)
        else:
            row["eval_peak_reserved_bytes"] = report.evaluation.peak_reserved_bytes
    row["ok"] = True
    return row


def summary(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    tried = [r for r in rows if r["ok"] is not None]
    seconds = [r["train_eval_seconds"] for r in rows if r["ok"]]
    families: Dict[str, Dict[str, int]] = {}
    for r in tried:
        counts = families.setdefault(r["family"], {"analysed": 0, "total": 0})
        counts["total"] += 1
        counts["analysed"] += bool(r["ok"])
    return {
        "total": len(rows),
        "tried": len(tried),
        "analysed": sum(bool(r["ok"]) for r in tried),
        "skipped": len(rows) - len(tried),
        "families": families,
        "median_seconds": round(statistics.median(seconds), 2) if seconds else None,
        "max_seconds": round(max(seconds), 2) if seconds else None,
    }


def _mib(value: Optional[int]) -> str:
    return "" if value is None else f"{value / 2**20:,.0f}"


def print_table(rows: List[Dict[str, Any]]) -> None:
    print(f"{'model':36} {'family':12} {'train s':>8} {'+eval s':>7} {'peak MiB':>9} {'eval MiB':>9}  result")
    for r in rows:
        result = "ok" if r["ok"] else f"{r['stage']}: {r['reason']}"
        print(
            f"{r['name'][:36]:36} {r['family']:12} {r.get('train_seconds', ''):>8} "
            f"{r.get('train_eval_seconds', ''):>7} "
            f"{_mib(r.get('peak_reserved_bytes')):>9} {_mib(r.get('eval_peak_reserved_bytes')):>9}  {result}"
        )


def merge(names: List[str]) -> int:
    """Join the rows of runs split by family (two processes on two cores) into zoo.json, in the zoo's order."""
    found: Dict[str, Dict[str, Any]] = {}
    for name in names:
        found.update({r["name"]: r for r in json.loads((RESULTS / f"{name}.json").read_text())["models"]})
    rows = [found[e.name] for e in zoo() if e.name in found]
    data = {"command": "python -m benchmarks.zoo", "install": INSTALL, "merged_from": names}
    write_result("zoo", {**data, "summary": summary(rows), "models": rows})
    print_table(rows)
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated entry names")
    parser.add_argument("--family", default="", help="comma-separated families")
    parser.add_argument("--out", default="", help="write results/<OUT>.json for a filtered run too")
    parser.add_argument("--merge", default="", help="comma-separated result names: join their rows into zoo.json")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge.split(","))
    names, families = set(filter(None, args.only.split(","))), set(filter(None, args.family.split(",")))
    entries = [e for e in zoo() if (not names or e.name in names) and (not families or e.family in families)]
    out = args.out or ("zoo" if not names and not families else "")
    rows: List[Dict[str, Any]] = []
    for entry in entries:
        rows.append(run_entry(entry))
        r = rows[-1]
        print(f"[{len(rows)}/{len(entries)}] {entry.name}: {'ok' if r['ok'] else r['reason']}", flush=True)
        if out:
            command = " ".join(["python -m benchmarks.zoo", *(argv if argv is not None else sys.argv[1:])])
            write_result(out, {"command": command, "install": INSTALL, "summary": summary(rows), "models": rows})
    print_table(rows)
    print(summary(rows))
    return 0
