"""What the outputs' text/plain and text/html fallbacks share: what nbconvert, GitHub or a Jupyter without the
labextension shows must read as well as the rich view.

- Tables align every cell themselves: JupyterLab's and nbconvert's stylesheets right-align `td`, which put
  notes and names flush right, far from their labels.
- Figures are named by label ("Optimizer step transient"), never by their payload key (`optimizer_transient`).
- Status words are words: emoji are missing from the fonts of many terminals, nbconvert's PDF and CI logs.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

FIGURE_LABELS: Mapping[str, str] = {
    "parameters": "Parameters",
    "buffers": "Buffers",
    "gradients": "Gradients",
    "optimizer": "Optimizer state",
    "optimizer_transient": "Optimizer step transient",
    "activations": "Activations",
    "input": "Input batch",
    "peak_allocated": "Peak allocated",
    "peak_reserved": "Peak reserved",
    "cublas_workspace": "cuBLAS workspace",
    "cudnn_workspace": "cuDNN workspace",
    "context": "CUDA context",
    "peak": "Peak",
    "quantised_weights": "Quantised weights",
    "dequant_transient": "Dequantisation transient",
    "adapters": "Adapters",
}

PICK_LABELS: Mapping[str, str] = {
    "maximum": "Maximum",
    "recommended": "Recommended",
    "safe": "Safe",
    "current": "Current",
    "rounding": "Rounding",
    "highest_throughput": "Highest throughput",
    "best_efficiency": "Best efficiency",
    "most_energy_efficient": "Most energy-efficient",
}

# Emoji and pictographs (0x1F000-0x1FAFF, 0x2600-0x27BF: "✅", "⚠️", "💾"), with the variation selector or joiner
# after them and the spaces that set them off from the words they stood before.
_PICTOGRAPH = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf][\ufe0f\u200d]* *")


def label(key: str, labels: Mapping[str, str] = FIGURE_LABELS) -> str:
    """A payload key as words: its label, else the key with spaces ("cpu_offload" -> "Cpu offload")."""
    return labels.get(key) or key.replace("_", " ").capitalize()


def plain(text: str) -> str:
    """`text` without emoji or pictographs: "✅ Good" -> "Good", "💾 Memory Analysis" -> "Memory Analysis"."""
    return "\n".join(line.rstrip() if line.strip() else line for line in _PICTOGRAPH.sub("", text).split("\n"))


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Column:
    """A table column: its heading, and whether its cells are numbers (right-aligned) or words (left)."""

    heading: str
    numeric: bool = False

    @property
    def align(self) -> str:
        return "right" if self.numeric else "left"


def html_table(caption: str, columns: Sequence[Column], rows: Sequence[Sequence[Any]], css_class: str = "") -> str:
    """A table whose every cell says its alignment: words left, numbers right, whatever the page's stylesheet."""
    head = "".join(f"<th style='text-align:{c.align}'>{esc(c.heading)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td style='text-align:{c.align}'>{esc(v)}</td>" for c, v in zip(columns, row)) + "</tr>"
        for row in rows
    )
    title = f"<caption style='text-align:left'><b>{esc(caption)}</b></caption>" if caption else ""
    attr = f" class='{esc(css_class)}'" if css_class else ""
    return f"<table{attr}>{title}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_facts(caption: str, rows: Sequence[Sequence[Any]], css_class: str = "") -> str:
    """Label-value rows ("Kernel RSS" | "512 MiB"), both left-aligned: a value is read next to its label."""
    body = "".join(
        f"<tr><th style='text-align:left'>{esc(k)}</th><td style='text-align:left'>{esc(v)}</td></tr>" for k, v in rows
    )
    attr = f" class='{esc(css_class)}'" if css_class else ""
    return f"<table{attr}><caption style='text-align:left'><b>{esc(caption)}</b></caption>{body}</table>"


_NUMBER = re.compile(r"[-+]?[\d.,]+( ?(B|[KMGT]i?B|%|ms|s|x))?|n/a")


def _numeric(cells: Sequence[Any]) -> bool:
    """A column of numbers (ints, "1.25 GiB", "40%"): right-aligned; anything with words is left-aligned."""
    shown = [str(c).strip() for c in cells if str(c).strip()]
    return bool(shown) and all(_NUMBER.fullmatch(c) for c in shown)


def auto_table(caption: str, headings: Sequence[str], rows: Sequence[Sequence[Any]], css_class: str = "") -> str:
    """`html_table` with each column's alignment read off its cells: numbers right, words left."""
    columns = [
        Column(heading.capitalize() if heading.islower() else heading, _numeric([row[i] for row in rows]))
        for i, heading in enumerate(headings)
    ]
    return html_table(caption, columns, rows, css_class)
