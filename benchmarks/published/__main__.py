"""python -m benchmarks.published [--sources NAME ...] [--rows NAME ...]: writes benchmarks/results/published.json.

Sources: "hf" and "seminar" (the first two, their own layout), then each module of NEW_SOURCES (the new-source
protocol: SOURCE, TARGET and run(names), rows with published, predicted and error). --sources runs only those and
keeps every other source's entry as the last run wrote it; --rows runs only the rows of those names."""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import sys
from typing import Any, Dict, List, Optional, Sequence

from benchmarks._common import RESULTS, write_result
from benchmarks.published import runner
from benchmarks.published import source_hf as hf
from benchmarks.published import source_seminar as sem

# modules of benchmarks/published following the new-source protocol, in the README's order
NEW_SOURCES = (
    "source_torchtune",
    "source_torchao",
    "source_litgpt_inference",
    "source_octocoder",
    "source_litgpt",
    "source_torchtitan",
)
OLD_SOURCES = ("hf", "seminar")
TARGETS = {"reserved": 0.03, "total": 0.05, "allocated": 0.03}


def _hf(rows: Optional[Sequence[str]]) -> Dict[str, Any]:
    return {
        "name": "Hugging Face, Efficient Training on a Single GPU (January 2022)",
        "url": hf.URL,
        "text": hf.MDX,
        "gpu": "Tesla V100-SXM2-16GB, driver 460.91.03, CUDA 11.2",
        "stack": f"torch {hf.TORCH}, CUDA {hf.CUDA} (eager module loading)",
        "context_mib": hf.CONTEXT_MIB,
        "rows": runner.run([r for r in hf.ROWS if not rows or r.name in rows]),
    }


def _seminar(rows: Optional[Sequence[str]]) -> Dict[str, Any]:
    return {
        "name": "Efficient Deep Learning Systems (YSDA), week 2 seminar: full, half and mixed precision",
        "url": sem.URL,
        "text": sem.URL,
        "gpu": "not named (planned for " + " and ".join(sem.GPUS) + ")",
        "stack": f"torch {sem.TORCH}, CUDA {sem.CUDA}",
        "measure": "max_memory_allocated() // 1e6 (MB)",
        "rows": runner.run_seminar([r for r in sem.ROWS if not rows or r.name in rows]),
    }


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def new_source(name: str, rows: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """One protocol module's entry: its SOURCE, its target and the rows its run() returns."""
    module = importlib.import_module(f"benchmarks.published.{name}")
    ran = module.run(rows or None)
    return {
        "module": name,
        "date": _now(),  # a partial run keeps the others' entries, each with the date it ran
        **module.SOURCE,
        "target": module.TARGET,
        "not_expressed": getattr(module, "NOT_EXPRESSED", ""),
        "rows": ran,
    }


def _previous() -> Dict[str, Any]:
    path = RESULTS / "published.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def collect(sources: Optional[Sequence[str]], rows: Optional[Sequence[str]]) -> Dict[str, Any]:
    """The result's sources: those asked for run now, the others as the last run wrote them."""
    wanted = set(sources or (*OLD_SOURCES, *NEW_SOURCES))
    unknown = wanted - set(OLD_SOURCES) - set(NEW_SOURCES)
    if unknown:
        raise SystemExit(f"unknown source(s) {sorted(unknown)}: choose from {[*OLD_SOURCES, *NEW_SOURCES]}")
    previous = _previous()
    old_before = {i: s for i, s in enumerate(previous.get("sources", []))}
    new_before = {s.get("module"): s for s in previous.get("new_sources", [])}
    old: List[Any] = []
    for index, (key, make) in enumerate((("hf", _hf), ("seminar", _seminar))):
        if key in wanted:
            old.append({**make(rows), "date": _now()})
        elif index in old_before:  # kept: the date it ran, not this run's
            old.append({**old_before[index], "date": old_before[index].get("date", previous.get("date"))})
    new = [new_source(n, rows) if n in wanted else new_before.get(n) for n in NEW_SOURCES]
    return {"sources": old, "new_sources": [s for s in new if s is not None], "targets": TARGETS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", nargs="*", help=f"only these sources ({', '.join((*OLD_SOURCES, *NEW_SOURCES))})")
    parser.add_argument("--rows", nargs="*", help="only these rows (names as in each source's ROWS)")
    args = parser.parse_args()
    sys.argv[0] = "-m benchmarks.published"  # the command recorded: as run from the repository root
    write_result("published", collect(args.sources, args.rows))


if __name__ == "__main__":
    main()
