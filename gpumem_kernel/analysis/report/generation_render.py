"""A generation plan's output (search.generation_plan's payload): a table of its figures and picks, as text/plain and
escaped text/html, both readable without the labextension (labels, notes left-aligned, no emoji)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from gpumem_kernel.render.fallback import Column, esc, html_table, plain
from gpumem_kernel.render.units import format_bytes

BANNER = "=" * 60


def _size(n: Any) -> str:
    return format_bytes(n, "fit") if isinstance(n, int) else "n/a"


def figure_rows(payload: Dict[str, Any]) -> List[Tuple[str, str, str]]:
    """(what, size, how it is counted) of the plan's byte figures."""
    batch, prompt, new = payload["batch_size"], payload["prompt"], payload["new"]
    static = payload["cache"] == "static"
    positions = prompt + new - 1
    logits = "last position" if payload["logits_positions"] == 1 else f"all {payload['logits_positions']} positions"
    weights_how = "parameters and buffers" + (f", {payload['quantize']}" if payload.get("quantize") else "")
    return [
        ("Weights", _size(payload["weights_bytes"]), weights_how),
        (
            f"KV cache ({'StaticCache' if static else 'DynamicCache'})",
            _size(payload["kv_cache_bytes"]),
            f"{batch} x {positions} positions, {_size(payload['kv_bytes_per_token'])} per token per sequence",
        ),
        (
            "Prefill peak",
            _size(payload["prefill_peak_bytes"]),
            f"{batch} x {prompt} prompt tokens, logits of the {logits}",
        ),
        ("Decode peak", _size(payload["decode_peak_bytes"]), f"the last step, {prompt + new - 1} tokens in the cache"),
        ("Peak allocated", _size(payload["peak_bytes"]), "the larger of the two"),
        ("Peak reserved", _size(payload["peak_reserved_bytes"]), "caching allocator, cuBLAS workspace included"),
    ]


def pick_rows(payload: Dict[str, Any]) -> List[Tuple[str, str, str]]:
    """(pick, value, what it holds fixed), with a device; none without one."""
    if payload.get("total_bytes") is None:
        return []
    fits = "yes" if payload["fits"] else "no"
    longest = payload.get("longest")
    rows = [
        (
            "Fits",
            fits,
            f"{payload['device']}: reserved peak + CUDA context {_size(payload['context_bytes'])} "
            f"within {_size(payload['total_bytes'])}",
        ),
        (
            "Longest prompt + new",
            str(longest) if longest else "none",
            f"batch {payload['batch_size']}, new = {payload['new']} fixed"
            + (f" (prompt {payload['longest_prompt']})" if longest else ""),
        ),
        (
            "Largest batch",
            str(payload["largest_batch"]) if payload.get("largest_batch") else "none",
            f"at {payload['prompt']} + {payload['new']} tokens",
        ),
    ]
    return rows


def title(payload: Dict[str, Any]) -> str:
    cache = payload["cache"]
    return (
        f"Generation plan: {payload['model']}, batch {payload['batch_size']}, prompt {payload['prompt']} + "
        f"{payload['new']} new tokens, {cache} cache"
    )


def _text_table(rows: Sequence[Tuple[str, str, str]]) -> List[str]:
    if not rows:
        return []
    first = max(len(r[0]) for r in rows)
    second = max(len(r[1]) for r in rows)
    return [f"{a:<{first}}  {b:>{second}}  {c}" for a, b, c in rows]


def generation_bundle(payload: Dict[str, Any]) -> Dict[str, str]:
    """text/plain and text/html of a generation plan's payload."""
    heading = plain(title(payload))
    figures, picks, notes = figure_rows(payload), pick_rows(payload), payload.get("notes", [])
    text = [BANNER, heading, BANNER] + _text_table(figures)
    if picks:
        text += [""] + _text_table(picks)
    text += [""] + [f"- {plain(str(n))}" for n in notes]
    text += ["", f"Engine: traced (fake tensors), {payload['elapsed_seconds']} s", BANNER]
    columns = (Column("What"), Column("Size", numeric=True), Column("Counted"))
    html = f"<div class='gpumem-generation'><p><b>{esc(heading)}</b></p>"
    html += html_table("Memory", columns, figures, "gpumem-analysis")
    if picks:
        html += html_table("For this device", (Column("Pick"), Column("Value"), Column("Held fixed")), picks)
    if notes:
        html += "<ul>" + "".join(f"<li style='text-align:left'>{esc(plain(str(n)))}</li>" for n in notes) + "</ul>"
    html += f"<p><i>Engine: traced (fake tensors), {esc(payload['elapsed_seconds'])} s</i></p></div>"
    return {"text/plain": plain("\n".join(text)), "text/html": html}
