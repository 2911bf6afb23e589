"""The report's language-model lines, from the payload's `llm` and `sequence_search` sections (analysis.trace.llm_facts,
analysis.search.max_sequence): the logits and loss line, the attention implementation and the path traced, what
checkpointing wrapped, and the longest sequence at each batch. Text and HTML say the same; both sections are absent
from older payloads. Kept apart from render.py so the report's other blocks and these change independently."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple

from gpumem_kernel.render.units import human

_SOURCE_WORDS = {"option": "--seq-multiple", "setting": "JupyterLab setting", "default": "default"}


def _row(label: str, value: str) -> str:
    return f"  {label + ':':<18}{value}"


def _count(value: Optional[int]) -> str:
    return "n/a" if value is None else f"{value:,}"


def logits_line(logits: Mapping[str, Any]) -> str:
    """ "vocab 32,000 × seq 2,048 × batch 4 (262.1M values): logits 500 MiB bfloat16 (lm_head output) + 1000 MiB
    float32 copy (the loss's upcast) + ..."; the parts the trace saw, in the order the step makes them."""
    values = logits["vocab"] * logits["seq"] * logits["batch"]
    parts = [f"logits {human(logits['logits_bytes'])} {logits['dtype']} (lm_head output)"]
    if logits["upcast_bytes"]:
        parts.append(f"{human(logits['upcast_bytes'])} float32 copy (the loss's upcast)")
    if logits["log_softmax_bytes"]:
        parts.append(f"{human(logits['log_softmax_bytes'])} log-softmax (cross-entropy)")
    if logits["other_bytes"]:
        parts.append(f"{human(logits['other_bytes'])} other copies (shifts, soft-capping)")
    head = f"vocab {logits['vocab']:,} × seq {logits['seq']:,} × batch {logits['batch']:,} ({values / 1e6:.1f}M values)"
    held = (
        f"{human(logits['held_bytes'])} alive at once, {human(logits['at_peak_bytes'])} at the step's peak; "
        f"backward {human(logits['backward_bytes'])} more, transient"
    )
    return f"{head}: {' + '.join(parts)}; {held}"


def checkpointing_text(checkpointed: Optional[Mapping[str, Any]], asked: bool) -> Optional[str]:
    if checkpointed is not None:
        return f"{checkpointed['blocks']} {checkpointed['kind']} ({checkpointed['names']})"
    return "asked, but no repeated blocks found: traced without it" if asked else None


def _llm_rows(payload: Mapping[str, Any]) -> List[Sequence[str]]:
    llm = payload.get("llm")
    if not llm:
        return []
    rows = []
    if llm["attention"]:
        rows.append(("Attention", f"{llm['attention']} (config._attn_implementation)"))
    if llm.get("attention_path"):  # absent from older payloads
        rows.append(("Attention path", f"{llm['attention_path']} (as traced)"))
    checkpointing = checkpointing_text(llm["checkpointing"], bool(payload["settings"].get("checkpointing")))
    if checkpointing:
        rows.append(("Checkpointing", checkpointing))
    if llm["logits"]:
        rows.append(("Logits & Loss", logits_line(llm["logits"])))
    return rows


def multiple_text(search: Mapping[str, Any]) -> str:
    return f"{search['multiple']} tokens ({_SOURCE_WORDS.get(search['multiple_source'], 'default')})"


def sequence_row(result: Mapping[str, Any]) -> str:
    picks = (
        f"longest {_count(result['maximum'])}; recommended {_count(result['recommended'])}; "
        f"safe {_count(result['safe'])} tokens"
    )
    return picks + (f" ({result['note']})" if result["note"] else "")


def llm_block(payload: Mapping[str, Any]) -> List[str]:
    """The text report's "Language Model" block; [] for a payload without LLM facts."""
    rows = _llm_rows(payload)
    return ["🧠 Language Model:"] + [_row(label, value) for label, value in rows] if rows else []


def sequence_block(payload: Mapping[str, Any]) -> List[str]:
    """The text report's "Longest Sequence" block (search="seq"); [] otherwise."""
    search = payload.get("sequence_search")
    if not search:
        return []
    lines = [f"📏 Longest Sequence ({search['engine']}, in multiples of {multiple_text(search)}):"]
    lines += [_row(f"Batch {result['batch']}", sequence_row(result)) for result in search["results"]]
    return lines


def llm_tables(payload: Mapping[str, Any]) -> List[Tuple[str, Sequence[str], List[Sequence[Any]]]]:
    """The same lines as (caption, head, rows) for the HTML report's tables (render.py draws and escapes them)."""
    tables: List[Tuple[str, Sequence[str], List[Sequence[Any]]]] = []
    rows = _llm_rows(payload)
    if rows:
        tables.append(("Language model", ("fact", "value"), list(rows)))
    search = payload.get("sequence_search")
    if search:
        picks: List[Sequence[Any]] = [
            (r["batch"], _count(r["maximum"]), _count(r["recommended"]), _count(r["safe"]), r["note"])
            for r in search["results"]
        ]
        head = ("batch", "longest", "recommended", "safe", "note")
        tables.append((f"Longest sequence, in multiples of {multiple_text(search)}", head, picks))
    return tables
