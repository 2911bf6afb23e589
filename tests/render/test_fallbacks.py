"""The text/plain and text/html fallbacks (what nbconvert, GitHub or a Jupyter without the labextension shows)
read as well as the rich views: labels rather than payload keys, words left-aligned and numbers right-aligned
whatever the page's stylesheet does to `td`, and no emoji that the common fonts lack. Real payloads: the
renderer fixtures the browser tests use (src/__tests__/fixtures)."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from gpumem_kernel.analysis.report.render import analysis_bundle
from gpumem_kernel.autobatch.search import render_html as autobatch_html
from gpumem_kernel.autobatch.search import render_text as autobatch_text
from gpumem_kernel.benchmark.report import render_html as benchmark_html
from gpumem_kernel.benchmark.report import render_text as benchmark_text
from gpumem_kernel.magics.analysis import recommend_bundle
from gpumem_kernel.probe.host import HostReader
from gpumem_kernel.render.fallback import label, plain
from gpumem_kernel.render.status import render_html as status_html

FIXTURES = Path(__file__).resolve().parents[2] / "src" / "__tests__" / "fixtures"
GiB = 1024**3
# Emoji and pictographs: the blocks the common text fonts (DejaVu Sans, Liberation, Arial) lack.
PICTOGRAPH = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\ufe0f]")
SNAKE_KEY = re.compile(r"\b[a-z]+_[a-z_]+\b")


def fixture(name: str) -> Dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text("utf-8"))


class Cells(HTMLParser):
    """Each table cell of a page: its tag, its text-align and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: List[Tuple[str, str, str]] = []
        self._open: List[Any] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Any]]) -> None:
        if tag in ("td", "th"):
            style = dict(attrs).get("style") or ""
            align = re.search(r"text-align:\s*(\w+)", style)
            self._open = [tag, align.group(1) if align else "", ""]

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[2] += data

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._open:
            self.cells.append((self._open[0], self._open[1], self._open[2]))
            self._open = []


def cells(page: str) -> List[Tuple[str, str, str]]:
    parser = Cells()
    parser.feed(page)
    return parser.cells


def visible_text(page: str) -> str:
    return re.sub(r"<[^>]+>", " ", page)


def is_number(text: str) -> bool:
    return re.fullmatch(r"[\d.,]+( [KMG]iB| B)?|n/a", text.strip()) is not None


def assert_aligned(page: str) -> None:
    """Every cell says its alignment; words are left-aligned, only numbers right."""
    found = cells(page)
    assert found
    for tag, align, text in found:
        assert align in ("left", "right"), (tag, text)
        if align == "right" and tag == "td" and text.strip():
            assert is_number(text), text


def sample_without_gpu() -> Dict[str, Any]:
    return {
        "gpu": {"available": False, "reason": "NVIDIA driver library not found", "devices": []},
        "host": dataclasses.asdict(HostReader().read()),
        "errors": [],
    }


@pytest.mark.parametrize("name", ["benchmark_simulated", "benchmark_interrupted"])
def test_the_benchmark_fallbacks_use_the_views_labels_and_no_emoji(name: str) -> None:
    payload = fixture(name)
    page = benchmark_html(payload)
    text = benchmark_text(payload)
    assert not PICTOGRAPH.search(text) and not PICTOGRAPH.search(page)
    assert "OPTIMAL CONFIGURATION" in text and "Recommended for Training:" in text
    assert_aligned(page)
    headings = [t for tag, _, t in cells(page) if tag == "th"]
    assert "Samples/s" in headings and "Pin memory" in headings and "Status" in headings
    kinds = "Highest throughput|Best efficiency|Recommended|Most energy-efficient"
    picks = re.findall(rf"<li>((?:{kinds}): [^<]*)</li>", page)
    assert len(picks) >= 3 and any(p.startswith("Recommended: batch") for p in picks)
    # the table and the picks are ours to word (the notes quote DataLoader arguments such as pin_memory)
    shown = " ".join([t for _, _, t in cells(page)] + picks)
    assert not SNAKE_KEY.findall(shown), SNAKE_KEY.findall(shown)
    statuses = {t for tag, _, t in cells(page) if tag == "td"} & {"ok", "out of memory", "swapping suspected"}
    assert statuses


def test_the_autobatch_fallbacks_say_ok_and_out_of_memory_in_words() -> None:
    payload = fixture("autobatch_simulated")
    page = autobatch_html(payload)
    text = autobatch_text(payload)
    assert not PICTOGRAPH.search(text) and not PICTOGRAPH.search(page)
    assert_aligned(page)
    results = [t for tag, align, t in cells(page) if tag == "td" and t.startswith(("ok", "out of memory"))]
    assert len(results) == len(payload["trials"])
    assert " ok " in text or " OOM" in text


@pytest.mark.parametrize("name", ["analysis_accum", "analysis_target", "analysis_nogpu"])
def test_recommend_names_the_picks_and_keeps_its_notes_by_them(name: str) -> None:
    bundle = recommend_bundle(fixture(name))
    page, text = bundle["text/html"], bundle["text/plain"]
    assert not PICTOGRAPH.search(text) and not PICTOGRAPH.search(page)
    assert text.splitlines()[1].startswith("Memory Analysis - ")
    assert_aligned(page)
    rows = [t for tag, _, t in cells(page) if tag == "td"]
    assert rows[0::3] == ["Maximum", "Recommended", "Safe", "Current", "Rounding"]
    notes = [(align, t) for i, (tag, align, t) in enumerate(c for c in cells(page) if c[0] == "td") if i % 3 == 2]
    assert all(align == "left" for align, _ in notes)
    assert not SNAKE_KEY.findall(visible_text(page).replace("--round", ""))


@pytest.mark.parametrize("name", ["analysis_accum", "analysis_llm", "analysis_target", "analysis_nogpu"])
def test_the_analysis_fallbacks_name_figures_by_label(name: str) -> None:
    payload = fixture(name)
    bundle = analysis_bundle(payload)
    page, text = bundle["text/html"], bundle["text/plain"]
    assert not PICTOGRAPH.search(text) and not PICTOGRAPH.search(page)
    assert text.splitlines()[1].startswith("Memory Analysis - ")
    assert_aligned(page)
    shown = [t for tag, _, t in cells(page) if tag == "td"]
    for figure in payload["figures"]:
        assert figure["name"] not in shown or "_" not in figure["name"]
    assert "Optimizer step transient" in shown and "Peak allocated" in shown
    assert "optimizer_transient" not in shown and "peak_allocated" not in shown
    assert "Recommended" in shown and "recommended" not in shown


def test_the_status_table_reads_each_value_next_to_its_label() -> None:
    page = status_html(sample_without_gpu())
    assert_aligned(page)
    values = {t for tag, align, t in cells(page) if tag == "td" and align == "left"}
    assert any(v.endswith("iB") for v in values)  # the kernel's RSS, left by its label


def test_plain_drops_pictographs_and_keeps_the_common_symbols() -> None:
    assert plain("  Current:          64 ✅ Good") == "  Current:          64 Good"
    assert plain("⚠️  Interrupted: partial table\n💾 Memory Analysis") == "Interrupted: partial table\nMemory Analysis"
    assert plain("a — b · c → d ± 5% ≥ 3 … ×2") == "a — b · c → d ± 5% ≥ 3 … ×2"


def test_figures_are_named_by_label_not_key() -> None:
    assert label("optimizer_transient") == "Optimizer step transient"
    assert label("peak_allocated") == "Peak allocated"
    assert label("some_new_figure") == "Some new figure"
    for name in (f["name"] for f in fixture("analysis_llm")["figures"]):
        assert "_" not in label(name)
