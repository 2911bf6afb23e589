"""python -m benchmarks.published [--rows NAME ...]: writes benchmarks/results/published.json (both sources)."""

from __future__ import annotations

import argparse
import sys

from benchmarks._common import write_result
from benchmarks.published import runner
from benchmarks.published import source_hf as hf
from benchmarks.published import source_seminar as sem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", nargs="*", help="only these rows (names as in source_hf.ROWS, source_seminar.ROWS)")
    args = parser.parse_args()
    sys.argv[0] = "-m benchmarks.published"  # the command recorded: as run from the repository root
    rows = [r for r in hf.ROWS if not args.rows or r.name in args.rows]
    results = runner.run(rows)
    seminar_rows = runner.run_seminar([r for r in sem.ROWS if not args.rows or r.name in args.rows])
    write_result(
        "published",
        {
            "sources": [
                {
                    "name": "Hugging Face, Efficient Training on a Single GPU (January 2022)",
                    "url": hf.URL,
                    "text": hf.MDX,
                    "gpu": "Tesla V100-SXM2-16GB, driver 460.91.03, CUDA 11.2",
                    "stack": f"torch {hf.TORCH}, CUDA {hf.CUDA} (eager module loading)",
                    "context_mib": hf.CONTEXT_MIB,
                    "rows": results,
                },
                {
                    "name": "Efficient Deep Learning Systems (YSDA), week 2 seminar: full, half and mixed precision",
                    "url": sem.URL,
                    "text": sem.URL,
                    "gpu": "not named (planned for " + " and ".join(sem.GPUS) + ")",
                    "stack": f"torch {sem.TORCH}, CUDA {sem.CUDA}",
                    "measure": "max_memory_allocated() // 1e6 (MB)",
                    "rows": seminar_rows,
                },
            ],
            "targets": {"reserved": 0.03, "total": 0.05, "allocated": 0.03},
        },
    )


if __name__ == "__main__":
    main()
