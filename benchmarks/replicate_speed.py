"""Issue 25, speed: how long a traced analysis of a Llama-shaped model takes with its decoder layers traced once and
replicated (analysis.replicate), beside the full trace of every layer, and whether the two agree.

Llama-3.2-1B, Llama-3-8B and Llama-3-70B configs (written out below as published; 8B is tests/data/hf_configs's),
built on the meta device; bf16 weights, AMP bf16, AdamW, gradient checkpointing, 2048 tokens, batch 1. Each
measurement runs in a fresh Python process (cold: nothing imported, no fake-tensor cache warm):
  - trace: one `run_trace` at batch 1 (the model built first, not timed), replicated and full, with the peak of
    live bytes, the allocator model's peak reserved, and a hash of the device event stream of each;
  - analyze: the whole `%gpumem analyze` call as a process runs it (imports, the config, building the model, the
    traces the batch search asks for, the report), replicated and full (the full one by raising
    replicate.MIN_AUTO_RUN out of reach), with the time its imports of torch and transformers took apart.

    PYTHONPATH=. .venv/bin/python benchmarks/replicate_speed.py [--models 1b,8b,70b] [--skip-full-70b]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from _common import write_result

ROOT = Path(__file__).resolve().parent.parent
_LLAMA3 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "mlp_bias": False,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 128256,
}
CONFIGS: Dict[str, Dict[str, Any]] = {
    "1b": {  # meta-llama/Llama-3.2-1B
        **_LLAMA3,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "tie_word_embeddings": True,
    },
    "8b": json.loads((ROOT / "tests/data/hf_configs/llama3_8b/config.json").read_text()),  # Meta-Llama-3-8B
    "70b": {  # meta-llama/Meta-Llama-3-70B
        **_LLAMA3,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rope_scaling": None,
        "tie_word_embeddings": False,
    },
}
TOKENS = 2048
OPTIONS = dict(batch_size=1, input=TOKENS, amp="bf16", checkpointing=True, optimizer="adamw")


def _child(what: str, config: str, full: bool) -> Dict[str, Any]:
    """One measurement, in this (fresh) process; the clock starts before any import."""
    started = time.perf_counter()
    from gpumem_kernel.analysis import replicate

    if full:
        replicate.MIN_AUTO_RUN = 10**9  # the automatic choice never replicates: the full trace
    if what == "analyze":
        import torch  # noqa: F401  (timed apart: a kernel that trains has imported them already)
        import transformers  # noqa: F401

        from gpumem_kernel.analysis.model_source import analyze_named

        imported = time.perf_counter() - started
        report = analyze_named(config, **OPTIONS)
        notes = [n for n in report.notes if "replicated" in n or "full trace of every block" in n]
        return {
            "seconds": round(time.perf_counter() - started, 2),
            "imports_seconds": round(imported, 2),
            "peak_reserved_bytes": report.peak_reserved_bytes,
            "peak_live_bytes": report.peak_live_bytes,
            "notes": notes,
        }
    from gpumem_kernel.analysis.model_source import build, default_input
    from gpumem_kernel.analysis.trace import run_trace
    from gpumem_kernel.analysis.trace_plan import TracePlan
    from gpumem_kernel.analysis.training_loop import default_loss

    built = build(config)
    make, _, _ = default_input(built, TOKENS, None)
    plan = TracePlan(built.model, "adamw", lambda b, fake: make(b), default_loss, amp="bf16", checkpointing=True)
    traced = time.perf_counter()
    result = run_trace(plan, 1)
    seconds = time.perf_counter() - traced
    stream = hashlib.sha256(repr(result.device.events).encode()).hexdigest()[:16]
    return {
        "seconds": round(seconds, 2),
        "process_seconds": round(time.perf_counter() - started, 2),
        "peak_live_bytes": result.peak_live,
        "peak_reserved_bytes": result.device.peak_reserved,
        "events": len(result.device.events),
        "event_stream_sha256": stream,
        "replication": result.replication.note() if result.replication else None,
    }


def _measure(what: str, config: str, full: bool) -> Dict[str, Any]:
    command = [sys.executable, __file__, "--child", what, config] + (["--full"] if full else [])
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'benchmarks'}"}
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(name: str, config: str, skip_full: bool) -> Dict[str, Any]:
    row: Dict[str, Any] = {"model": name, "layers": CONFIGS[name]["num_hidden_layers"]}
    for what in ("trace", "analyze"):
        replicated = _measure(what, config, False)
        print(name, what, "replicated", replicated, flush=True)
        if what == "analyze" and name == "70b" and skip_full:
            full: Dict[str, Any] = {"skipped": "--skip-full-70b"}
        else:
            full = _measure(what, config, True)
            print(name, what, "full", full, flush=True)
        row[what] = {"replicated": replicated, "full": full}
        if "seconds" in full:
            row[what]["speedup"] = round(full["seconds"] / replicated["seconds"], 2)
            row[what]["same_peaks"] = all(
                replicated[key] == full[key] for key in ("peak_live_bytes", "peak_reserved_bytes")
            )
        if what == "trace" and "event_stream_sha256" in full:
            row[what]["same_event_stream"] = replicated["event_stream_sha256"] == full["event_stream_sha256"]
    return row


def _seconds(side: Dict[str, Any]) -> str:
    return f"{side['seconds']:.1f} s" if "seconds" in side else f"not run: {side.get('skipped', '?')}"


def _gib(side: Dict[str, Any], key: str) -> str:
    return f"{side[key] / 2**30:.2f} GiB" if key in side else "—"


def section(r: Optional[Dict[str, Any]], provenance: Callable[[Dict[str, Any]], str]) -> str:
    """README section 11 (benchmarks/make_readme.py)."""
    head = "## 11. Repeated blocks traced once (issue 25, speed)\n\n"
    if r is None:
        return head + "**Figure:** not measured: no `results/replicate_speed.json` yet.\n"
    rows = r["rows"]
    targets = r["targets_seconds"]
    figure = "**Figure:** cold `%gpumem analyze` (one process: imports, config, traces, report) " + ", ".join(
        f"{row['model'].upper()} {row['analyze']['replicated']['seconds']:.1f} s, of which "
        f"{row['analyze']['replicated'].get('imports_seconds', 0):.1f} s importing torch and transformers "
        f"(target {targets[row['model']]} s; full trace {_seconds(row['analyze']['full'])})"
        for row in rows
    )
    same = all(row["trace"].get("same_event_stream") and row["trace"].get("same_peaks") for row in rows)
    figure += f"; replicated and full traces give the same event stream and peaks: {same}."
    text = (
        f"\n\n{r['setup']}. A run of identical decoder layers runs its first, second (which shows what a layer keeps "
        "of its input) and last layer for real in the first step and replays the others' recorded allocations and "
        "frees, and every layer in the second (analysis.replicate); the full trace runs every layer. *trace*: one "
        "`run_trace` at batch 1 after building the model; *analyze*: the whole call in a fresh process, whose batch "
        "search traces more than one batch. "
        f"Seconds on a shared machine{_load(r)}: ratios hold better than absolute times.\n\n"
    )
    body = table_rows(rows)
    return head + figure + text + body + f"\n\n{provenance(r)}\n"


def _load(r: Dict[str, Any]) -> str:
    load = r.get("load_average")
    return f" (1-minute load average {load['before']} before the run, {load['after']} after)" if load else ""


def table_rows(rows: List[Dict[str, Any]]) -> str:
    header = [
        "model",
        "layers",
        "trace, replicated",
        "trace, full",
        "analyze, replicated",
        "analyze, full",
        "peak live (both)",
        "peak reserved, replicated / full",
        "same event stream",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        trace, analyze = row["trace"], row["analyze"]
        cells = [
            row["model"].upper(),
            str(row["layers"]),
            _seconds(trace["replicated"]),
            _seconds(trace["full"]),
            _seconds(analyze["replicated"]),
            _seconds(analyze["full"]),
            _gib(trace["replicated"], "peak_live_bytes"),
            f"{_gib(trace['replicated'], 'peak_reserved_bytes')} / {_gib(trace['full'], 'peak_reserved_bytes')}",
            str(trace.get("same_event_stream", "—")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="1b,8b,70b")
    parser.add_argument("--skip-full-70b", action="store_true", help="not the full 70B analyze (about a minute)")
    parser.add_argument("--child", nargs=2, metavar=("WHAT", "CONFIG"), help=argparse.SUPPRESS)
    parser.add_argument("--full", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.full)))
        return
    rows: List[Dict[str, Any]] = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            path = Path(folder) / name / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(CONFIGS[name]))
            rows.append(_row(name, str(path), args.skip_full_70b))
    write_result(
        "replicate_speed",
        {
            "setup": f"Llama-shaped, bf16 weights, AMP bf16, AdamW, gradient checkpointing, {TOKENS} tokens, batch 1",
            "targets_seconds": {"1b": 4, "8b": 10, "70b": 30},
            # the machine's 1-minute load average before and after (2 cores, shared): the seconds are as loaded
            "load_average": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
