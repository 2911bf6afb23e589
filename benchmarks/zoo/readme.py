"""The zoo's section of benchmarks/README.md (make_readme.py calls section() with results/zoo.json)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

HEAD = "## 9. Model zoo: public architectures that must analyse (issue 24)\n\n"
RUN = "PYTHONPATH=. nice -n 10 .venv/bin/python -m benchmarks.zoo"
INSTALL = ".venv/bin/pip install --no-deps --target benchmarks/zoo/.packages -r benchmarks/zoo/requirements.txt"


def _families(summary: Dict[str, Any]) -> str:
    return ", ".join(f"{name} {c['analysed']}/{c['total']}" for name, c in summary["families"].items())


def _exceptions(models: List[Dict[str, Any]]) -> str:
    failed = [m for m in models if m["ok"] is False]
    skipped = [m for m in models if m["ok"] is None]
    lines = ["| model | family | stage | reason |", "|---|---|---|---|"]
    lines += [f"| {m['name']} | {m['family']} | {m['stage']} | {m['reason']} |" for m in failed + skipped]
    return "\n".join(lines) if failed or skipped else "None: every entry analysed."


def section(result: Optional[Dict[str, Any]], provenance: Any = None) -> str:
    if result is None:
        return HEAD + f"**Figure:** not measured: run `{RUN}` (extra packages: benchmarks/zoo/requirements.txt).\n"
    s, models = result["summary"], result["models"]
    share = 1 - s["analysed"] / s["tried"] if s["tried"] else 0.0
    figure = (
        f"**Figure:** {s['analysed']}/{s['tried']} architectures analysed, training step and evaluation "
        f"({_families(s)}); {s['tried'] - s['analysed']} exceptions ({share:.1%} of the zoo, target at most 5 %), "
        f"{s['skipped']} skipped (package not installed) of {s['total']}. Seconds per model (training analysis "
        f"and evaluation, one `analyze(eval_batch=)` call): median {s['median_seconds']}, max {s['max_seconds']}."
    )
    body = f"Exceptions, each with the analysis's one-line reason:\n\n{_exceptions(models)}\n"
    return HEAD + figure + "\n\n" + body + ("\n" + provenance(result) + "\n" if provenance else "")
