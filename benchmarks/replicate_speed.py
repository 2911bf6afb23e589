"""Issue 25, speed: how long a traced analysis of a Llama-shaped model takes with its decoder layers traced once and
replicated (analysis.trace.replicate) and the optimizer's steps replayed in the search's traces
(analysis.trace.optimizer_replay),
beside the full trace of every layer, and whether the two agree.

Llama-3.2-1B, Llama-3-8B and Llama-3-70B configs (written out below as published; 8B is tests/data/hf_configs's),
built on the meta device; bf16 weights, AMP bf16, AdamW, gradient checkpointing, 2048 tokens, batch 1, target H100
(the issue's case). Each measurement runs in a fresh Python process (cold: nothing imported, no fake-tensor cache
warm), our package byte-compiled first as pip installs it:
  - trace: one `run_trace` at batch 1 (the model built first, not timed), replicated and full, with the peak of
    live bytes, the allocator model's peak reserved, and a hash of the device event stream of each;
  - analyze: the whole `%gpumem analyze` call as a process runs it, timed in three parts: importing torch, importing
    transformers and the architecture's module (what a kernel pays once, and a notebook that loads the model has
    paid), and the analysis (the config, building the model, the traces the batch search asks for, the report);
    replicated and full (the full one by raising replicate.MIN_AUTO_RUN out of reach), and replicated with every
    optimizer step run (what the replayed steps save).

Plans (issue 38, the analysis in seconds): the whole `%gpumem analyze` of the QLoRA 8B plan (tour 07's flags), the
same with `--search seq`, and the 70B plan above, each on the config as the Hub ships it (use_cache true, its
torch_dtype and rope scaling), timed as *analyze* is (imports apart: torch, transformers with the architecture's
module, and peft, which a LoRA notebook has imported and --advise's LoRA rows import once per kernel), beside
the same measurement of the package at a previous commit (`--previous REV`: its gpumem_kernel, extracted with
`git archive`, run by the same interpreter).

    PYTHONPATH=. .venv/bin/python benchmarks/replicate_speed.py [--models 1b,8b,70b] [--skip-full-70b] [--repeat 3]
    PYTHONPATH=. .venv/bin/python benchmarks/replicate_speed.py --plans-only --previous 92b2fd9 [--plans ...]
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from _common import RESULTS, write_result

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
OPTIONS = dict(batch_size=1, input=TOKENS, amp="bf16", checkpointing=True, optimizer="adamw", target="H100")
VARIANTS = ("replicated", "full", "steps_run")  # the analyze child's: as shipped, every layer traced, no replayed steps
_QLORA = dict(
    batch_size=1,
    seq=TOKENS,
    quantize="nf4",
    lora="r=16",
    optimizer="paged-adamw8bit",
    amp="bf16",
    checkpointing=True,
    target="RTX 4090",
)
_QLORA_FLAGS = (
    f"-b 1 --seq {TOKENS} --quantize nf4 --lora r=16 --optimizer paged-adamw8bit --amp bf16 --checkpointing "
    '--target "RTX 4090"'
)
# name: (config, analyze_named's options, the command as a notebook types it, the target in seconds)
PLANS: Dict[str, Tuple[str, Dict[str, Any], str, float]] = {
    "qlora-8b": ("8b", _QLORA, f"%gpumem analyze llama-3-8b {_QLORA_FLAGS}", 8),
    "qlora-8b-seq": ("8b", {**_QLORA, "search": "seq"}, f"%gpumem analyze llama-3-8b {_QLORA_FLAGS} --search seq", 12),
    # what makes an 8B full fine-tune fit a 24 GB GPU (tour 07): the analysis, then each lever as an analysis of its own
    "advise-8b-full": (
        "8b",
        {**OPTIONS, "target": "RTX 4090", "seq": TOKENS, "input": None, "advise": True},
        f'%gpumem analyze llama-3-8b -b 1 --seq {TOKENS} --amp bf16 --checkpointing --target "RTX 4090" --advise',
        20,
    ),
    "70b": (
        "70b",
        OPTIONS,
        f"%gpumem analyze llama-3-70b -b 1 --input {TOKENS} --amp bf16 --checkpointing --optimizer adamw --target H100",
        12,
    ),
}


def _child(what: str, config: str, variant: str) -> Dict[str, Any]:
    """One measurement, in this (fresh) process; the clock starts before any import."""
    started = time.perf_counter()
    if variant == "full":
        # the automatic choice never replicates: the full trace. No option of analyze() turns replication off, so
        # this measurement alone reaches the module's threshold (by name: not part of the analysis's entry point)
        replicate = importlib.import_module("gpumem_kernel.analysis.trace.replicate")
        replicate.MIN_AUTO_RUN = 10**9
    if what == "analyze":
        return _analyze(config, variant, started)
    if what == "plan":
        return _plan(config, variant, started)
    from gpumem_kernel.analysis import build_named_model as build, default_input
    from gpumem_kernel.analysis import run_trace
    from gpumem_kernel.analysis import TracePlan
    from gpumem_kernel.analysis import default_loss

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


def _analyze(config: str, variant: str, started: float) -> Dict[str, Any]:
    import torch  # noqa: F401

    torch_done = time.perf_counter()
    import transformers

    getattr(transformers, json.loads(Path(config).read_text())["architectures"][0])  # its module, as loading does
    libraries_done = time.perf_counter()
    from gpumem_kernel.analysis import analyze_named

    # steps_run: every trace runs its own optimizer steps
    report = analyze_named(config, **OPTIONS, replay_optimizer=variant != "steps_run")
    done = time.perf_counter()
    notes = [n for n in report.notes if "replicated" in n or "full trace of every block" in n]
    return {
        "seconds": round(done - started, 2),
        "torch_import_seconds": round(torch_done - started, 2),
        "transformers_import_seconds": round(libraries_done - torch_done, 2),
        "analysis_seconds": round(done - libraries_done, 2),
        "traces": len({p.batch_size for p in report.curve}),
        "maximum": report.recommendations.maximum,
        "peak_reserved_bytes": report.peak_reserved_bytes,
        "peak_live_bytes": report.peak_live_bytes,
        "notes": notes,
    }


def _plan(config: str, name: str, started: float) -> Dict[str, Any]:
    """One plan of PLANS, its imports timed apart; the package is the one on PYTHONPATH (this checkout's or a
    previous commit's)."""
    import torch  # noqa: F401

    torch_done = time.perf_counter()
    import transformers

    getattr(transformers, json.loads(Path(config).read_text())["architectures"][0])
    libraries_done = time.perf_counter()
    if PLANS[name][1].get("lora") or PLANS[name][1].get("advise"):
        # a LoRA notebook has imported it (the adapters are peft's); --advise's LoRA rows import it, with
        # bitsandbytes where that is installed, the first time in a kernel: a one-time import, as torch's
        import peft  # noqa: F401
    peft_done = time.perf_counter()
    import gpumem_kernel
    from gpumem_kernel.analysis import analyze_named

    traced = _count_traces()
    options = dict(PLANS[name][1])
    advised = options.pop("advise", False)
    cpu = time.process_time()
    advice = None
    if advised:
        report, advice = analyze_named(config, run=_analysed_and_advised, **options)
    else:
        report = analyze_named(config, **options)
    done, cpu = time.perf_counter(), time.process_time() - cpu
    sequences = report.sequence_search
    return {
        "seconds": round(done - started, 2),
        "torch_import_seconds": round(torch_done - started, 2),
        "transformers_import_seconds": round(libraries_done - torch_done, 2),
        "peft_import_seconds": round(peft_done - libraries_done, 2),
        "analysis_seconds": round(done - peft_done, 2),
        # the CPU time of the analysis call: on a shared, loaded machine nearer a quiet machine's wall clock
        "analysis_cpu_seconds": round(cpu, 2),
        "package": str(Path(gpumem_kernel.__file__).parent.parent),
        "traces": len({p.batch_size for p in report.curve}),
        "traced_runs": len(traced),  # the traces run (the searches predict the other points: size reuse)
        "maximum": report.recommendations.maximum,
        "peak_reserved_bytes": report.peak_reserved_bytes,
        "peak_live_bytes": report.peak_live_bytes,
        "longest_sequences": None if sequences is None else [r.maximum for r in sequences.results],
        "sequence_traces": None if sequences is None else sum(len(r.curve) for r in sequences.results),
        "advice_rows": None if advice is None else len(advice.rows),
        # each row's figures, to compare with the previous commit's: the same table, to the byte
        "advice_figures": None
        if advice is None
        else [[row.key, row.peak_bytes, row.maximum, row.status] for row in advice.rows],
        "advice_recommended": None
        if advice is None or advice.recommended is None
        else advice.rows[advice.recommended].lever,
    }


def _analysed_and_advised(model: Any, **options: Any) -> Tuple[Any, Any]:
    """The report, then what makes it fit, as `%gpumem analyze … --advise` computes them."""
    from gpumem_kernel import analysis

    request = analysis.AnalysisRequest(**options)
    if not hasattr(analysis, "analyzed_with_advice"):  # a previous commit's package: the magic's, as it was then
        from gpumem_kernel.magics.analysis import analysed_with_advice

        return analysed_with_advice(model, request, True, None)
    return analysis.analyzed_with_advice(model, request, True)


def _count_traces() -> List[int]:
    """The sizes the engines trace, as they trace them (by module name, as the full variant reaches replicate: not
    part of the analysis's entry point)."""
    engines = importlib.import_module("gpumem_kernel.analysis.search.engines")
    traced: List[int] = []
    trace = engines.run_trace

    def counted(plan: Any, batch: int, **options: Any) -> Any:
        traced.append(batch)
        return trace(plan, batch, **options)

    engines.run_trace = counted
    return traced


def _measure(what: str, config: str, variant: str, root: Path = ROOT) -> Dict[str, Any]:
    command = [sys.executable, __file__, "--child", what, config, variant]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{ROOT / 'benchmarks'}"}
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fastest(what: str, config: str, variant: str, repeat: int, root: Path = ROOT) -> Dict[str, Any]:
    """The fastest of `repeat` fresh processes (a shared machine only ever adds time), with every run's seconds."""
    runs = [_measure(what, config, variant, root) for _ in range(repeat)]
    best = min(runs, key=lambda run: run["seconds"])
    return {**best, "runs_seconds": [run["seconds"] for run in runs]} if repeat > 1 else best


def _row(name: str, config: str, skip_full: bool, repeat: int) -> Dict[str, Any]:
    row: Dict[str, Any] = {"model": name, "layers": CONFIGS[name]["num_hidden_layers"]}
    for what in ("trace", "analyze"):
        sides: Dict[str, Any] = {}
        for variant in VARIANTS if what == "analyze" else VARIANTS[:2]:
            if variant == "full" and what == "analyze" and name == "70b" and skip_full:
                sides[variant] = {"skipped": "--skip-full-70b"}
                continue
            sides[variant] = _fastest(what, config, variant, repeat if variant != "full" else 1)
            print(name, what, variant, sides[variant], flush=True)
        replicated, full = sides["replicated"], sides["full"]
        row[what] = sides
        if "seconds" in full:
            row[what]["speedup"] = round(full["seconds"] / replicated["seconds"], 2)
            row[what]["same_peaks"] = all(
                replicated[key] == full[key] for key in ("peak_live_bytes", "peak_reserved_bytes")
            )
        if what == "trace" and "event_stream_sha256" in full:
            row[what]["same_event_stream"] = replicated["event_stream_sha256"] == full["event_stream_sha256"]
        if what == "analyze":
            row[what]["steps_run_same_report"] = all(
                sides["steps_run"][key] == replicated[key] for key in ("maximum", "peak_reserved_bytes", "traces")
            )
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
    figure = "**Figure:** the analysis of a cold `%gpumem analyze` (in a fresh process) " + ", ".join(
        f"{row['model'].upper()} {_part(row, 'analysis_seconds')} (target {targets[row['model']]} s; every layer "
        f"traced: {_part(row, 'analysis_seconds', 'full')})"
        for row in rows
    )
    figure += "; with importing torch, transformers and the architecture's module, once per kernel: " + ", ".join(
        f"{row['model'].upper()} {_part(row, 'seconds')}" for row in rows
    )
    same = all(row["trace"].get("same_event_stream") and row["trace"].get("same_peaks") for row in rows)
    figure += f". Replicated and full traces give the same event stream and peaks: {same}"
    replayed = all(row["analyze"].get("steps_run_same_report") for row in rows)
    figure += f"; replayed optimizer steps give the same maximum, peak and traces as steps run: {replayed}."
    text = (
        f"\n\n{r['setup']}. A run of identical decoder layers runs its first, second (which shows what a layer keeps "
        "of its input) and last layer for real in the first step and replays the others' recorded allocations and "
        "frees, and every layer in the second (analysis.trace.replicate); the full trace runs every layer. The "
        "search's traces after the first replay its optimizer steps (analysis.trace.optimizer_replay). *trace*: one "
        "`run_trace` at "
        "batch 1 after building the model; *analyze*: the whole call in a fresh process, split into importing torch, "
        "importing transformers with the model's module (a notebook that trains has paid both), and the analysis "
        "proper (config, model on the meta device, the search's traces, the report). "
        f"Seconds on a shared machine{_load(r)}, the fastest of {r.get('repeat', 1)} fresh processes (every layer "
        "traced: one): ratios hold better than absolute times.\n\n"
    )
    body = table_rows(rows)
    if r.get("rows_date"):  # the plans were timed later (--plans-only): the rows keep their own date
        body += f"\n\nThe rows above: measured {r['rows_date']}, `{r['rows_command']}`."
    body += TRANSFORMERS_VERSIONS
    body += plans_section(r.get("plans") or [])
    return head + figure + text + body + f"\n\n{provenance(r)}\n"


# What the 8B row gives on each transformers lane of the test command (measured by hand: `python -m gpumem_kernel
# analyze --model tests/data/hf_configs/llama3_8b/config.json -b 1 --input 2048 --amp bf16 --checkpointing
# --optimizer adamw --target H100` in .venv and in .venv-transformers4, and the traces' event streams compared)
TRANSFORMERS_VERSIONS = (
    "\n\n**transformers 4.57 and 5.x.** The rows above were traced with transformers 4.57.6. With 5.24.0 the 8B "
    "row's peak live is the same, 75.28 GiB, to 256 bytes: the rotary embedding's `original_inv_freq`, a buffer in "
    "5.x and a plain attribute in 4.57. The report's *Peak Allocated*, 75.34 GiB, is that plus the 64 MiB of cuBLAS "
    "and cuDNN workspaces, on both. What moves is the *Peak Reserved*: 76.56 GiB on 4.57.6, 76.46 GiB on 5.24.0 "
    "(-96 MiB, -0.12 %; one trace at batch 1: 76.54 and 76.52 GiB). Its cause is the model's prologue, not what a "
    "layer keeps for backward: 5.x computes the rotary angles as a broadcast product of the positions and `inv_freq` "
    "(4.57: a matmul of expanded fp32 copies), takes the positions from an `arange` with no `cache_position` tensor, "
    "and its mask helpers make other index tensors (a 1-byte `and_mask` result where 4.57 makes 2 KiB). These "
    "temporaries, 1 byte to 512 KiB, change the order of the allocations and frees the caching allocator model "
    "serves, and with it which cached blocks are split and kept at the peak. The attention path is the same on both: "
    "the two decide differently whether a mask of ones can be left to SDPA, and analysis.fake.attention_path makes a "
    "trace ask each version's decision as an eager run asks it (no mask: SDPA's `is_causal`, grouped-query K/V not "
    "expanded; a padded batch: a 4-D mask, K/V expanded; tests/analysis/test_attention_path.py on both lanes)."
)


def _wall_cpu(side: Dict[str, Any]) -> str:
    cpu = side.get("analysis_cpu_seconds")
    return f"{side['analysis_seconds']:.1f} s" + ("" if cpu is None else f" / {cpu:.1f} s")


def _met(plan: Dict[str, Any]) -> str:
    """Against the wall clock; where that misses, what the CPU time (nearer a quiet machine's) says."""
    now, target = plan["now"], plan["target_seconds"]
    if plan["met"]:
        first = now["analysis_seconds"] + now.get("peft_import_seconds", 0.0)
        if PLANS[plan["plan"]][1].get("advise") and first > target:  # the notebook had not imported peft
            return f"yes; {first:.1f} s with peft's first import in the kernel"
        return "yes"
    words = f"no: {now['analysis_seconds'] / target:.1f}x the target"
    cpu = now.get("analysis_cpu_seconds")
    if cpu is not None:
        words += f" ({cpu / target:.1f}x in CPU seconds)"
    return words


def plans_section(plans: List[Dict[str, Any]]) -> str:
    """The plans' table (issue 38): the analysis now and at the previous commit, against the issue's target."""
    if not plans:
        return ""
    counts = sorted({len(p["now"].get("runs_seconds") or [0]) for p in plans})
    text = (
        "\n\n**The analysis in seconds (issue 38).** Whole `%gpumem analyze` calls in a fresh process on the config "
        "as the Hub ships it (use_cache true, bf16 torch_dtype), the analysis timed apart from importing torch, "
        "transformers with the model's module, and peft (a LoRA notebook has imported it; `--advise`'s LoRA rows "
        "import it, with bitsandbytes, the first time in a kernel), each paid once per kernel, in *+ imports*; "
        "beside it the same "
        f"measurement of the package at the previous commit, the fastest of {' or '.join(map(str, counts))} fresh "
        "processes now (every run's seconds are in the results file), the machine's 1-minute load average around "
        "each row (2 shared cores: a loaded machine only adds time; the CPU seconds of the analysis are nearer what "
        "an otherwise idle machine takes). *Same figures*: the maximum, the peaks, the longest sequences and each "
        "advice row's peak, maximum and status are the previous commit's.\n\n"
    )
    header = [
        "plan",
        "analysis, wall / CPU (+ imports)",
        "previous commit, wall / CPU",
        "target",
        "met",
        "points (traced)",
        "same figures",
        "load average",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for plan in plans:
        now, previous = plan["now"], plan.get("previous")
        imports = now["torch_import_seconds"] + now["transformers_import_seconds"] + now["peft_import_seconds"]
        before = "—"
        if previous is not None:
            before = f"{_wall_cpu(previous)} ({previous['commit']})"
        load = plan["load_average"]
        cells = [
            f"`{plan['command']}`",
            f"{_wall_cpu(now)} (+{imports:.1f} s)",
            before,
            f"{plan['target_seconds']:g} s",
            _met(plan),
            _traces(now, previous),
            _same_cell(plan),
            f"{load['before']} / {load['after']}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return text + "\n".join(lines)


def _same_cell(plan: Dict[str, Any]) -> str:
    """True, or False with the advice rows that differ from the previous commit's (a row's peak in GiB)."""
    same = plan.get("same_report")
    if same is None or same or plan.get("previous") is None:
        return "—" if same is None else str(same)
    rows = {key: figures for key, *figures in plan["previous"].get("advice_figures") or []}
    changes = []
    for key, peak, maximum, status in plan["now"].get("advice_figures") or []:
        before = rows.pop(key, None)
        if before is None:
            changes.append(f"new row {key} ({peak / 2**30:.2f} GiB, {status})")
        elif before != [peak, maximum, status]:
            was, now = f"{before[0] / 2**30:.2f}", f"{peak / 2**30:.2f}"
            changes.append(f"{key} {was} → {now} GiB" if was != now else f"{key} {peak - before[0]:+,} bytes")
    changes += [f"row {key} gone" for key in rows]
    return "False" + (": " + "; ".join(changes) if changes else "")


def _traces(now: Dict[str, Any], previous: Optional[Dict[str, Any]]) -> str:
    """The points the searches report (batches + lengths), and the traces they ran for them now and before: the
    other points are predicted from the traced ones (analysis.search.size_reuse)."""
    points = str(now["traces"]) + ("" if not now.get("sequence_traces") else f" + {now['sequence_traces']} lengths")
    ran = [side.get("traced_runs") for side in (now, previous) if side is not None]
    if ran[0] is None:
        return points
    return points + f"; {ran[0]} traced" + (f" (previous: {ran[1]})" if len(ran) > 1 and ran[1] is not None else "")


def _load(r: Dict[str, Any]) -> str:
    load = r.get("load_average")
    return f" (1-minute load average {load['before']} before the run, {load['after']} after)" if load else ""


def _part(row: Dict[str, Any], key: str, variant: str = "replicated") -> str:
    side = row["analyze"].get(variant, {})
    return f"{side[key]:.1f} s" if key in side else f"not run: {side.get('skipped', '?')}"


def table_rows(rows: List[Dict[str, Any]]) -> str:
    header = [
        "model",
        "layers",
        "trace, replicated",
        "trace, full",
        "analysis (imports), replicated",
        "analysis, steps run",
        "analysis, full",
        "traces",
        "maximum on H100",
        "peak live",
        "peak reserved, replicated / full",
        "same event stream",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        trace, analyze = row["trace"], row["analyze"]
        replicated = analyze["replicated"]
        imports = replicated["torch_import_seconds"] + replicated["transformers_import_seconds"]
        cells = [
            row["model"].upper(),
            str(row["layers"]),
            _seconds(trace["replicated"]),
            _seconds(trace["full"]),
            f"{replicated['analysis_seconds']:.1f} s (+{imports:.1f} s)",
            _part(row, "analysis_seconds", "steps_run"),
            _part(row, "analysis_seconds", "full"),
            str(replicated["traces"]),
            str(replicated["maximum"]),
            _gib(trace["replicated"], "peak_live_bytes"),
            f"{_gib(trace['replicated'], 'peak_reserved_bytes')} / {_gib(trace['full'], 'peak_reserved_bytes')}",
            str(trace.get("same_event_stream", "—")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plan_row(
    name: str, configs: Dict[str, str], repeats: Tuple[int, int], previous: Optional[Tuple[str, Path]]
) -> Dict[str, Any]:
    """One plan now and (with `previous`) at the previous commit, the fastest of repeats[0] (now) and repeats[1]
    (previous) fresh processes, the 1-minute load average before and after."""
    config, _, command, target = PLANS[name]
    load_before = os.getloadavg()[0]
    now = _fastest("plan", configs[config], name, repeats[0])
    print(name, "now", now, flush=True)
    row: Dict[str, Any] = {"plan": name, "command": command, "target_seconds": target, "now": now}
    if previous is not None:
        row["previous"] = {**_fastest("plan", configs[config], name, repeats[1], previous[1]), "commit": previous[0]}
        print(name, "previous", row["previous"], flush=True)
        # the figures, not the number of points: a search that aims better traces fewer batches for the same answer
        row["same_report"] = all(
            row["previous"].get(key) == now.get(key)
            for key in ("maximum", "peak_reserved_bytes", "peak_live_bytes", "longest_sequences", "advice_figures")
        )
    row["met"] = now["analysis_seconds"] <= target
    row["load_average"] = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    return row


def _previous_package(rev: str, folder: Path) -> Path:
    """gpumem_kernel as it was at `rev` (git archive into `folder`), byte-compiled as the checkout is."""
    archive = subprocess.run(["git", "archive", rev, "gpumem_kernel"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    compileall.compile_dir(str(folder / "gpumem_kernel"), quiet=1)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="1b,8b,70b")
    parser.add_argument("--skip-full-70b", action="store_true", help="not the full 70B analyze (about a minute)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per figure (the fastest is kept)")
    parser.add_argument("--plans", default=",".join(PLANS), help="the plans to time (issue 38): " + ", ".join(PLANS))
    parser.add_argument(
        "--plans-only", action="store_true", help="only these plans; the model rows and other plans kept"
    )
    parser.add_argument("--previous", metavar="REV", help="also time the plans with gpumem_kernel as of this commit")
    parser.add_argument("--previous-repeat", type=int, help="fresh processes per previous figure (default --repeat)")
    parser.add_argument("--seq-repeat", type=int, help="fresh processes per --search seq figure (default --repeat)")
    parser.add_argument("--child", nargs=3, metavar=("WHAT", "CONFIG", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    # byte-compiled as pip installs it: a checkout under PYTHONDONTWRITEBYTECODE would compile it in every process
    compileall.compile_dir(str(ROOT / "gpumem_kernel"), quiet=1)
    rows: List[Dict[str, Any]] = []
    plans: List[Dict[str, Any]] = []
    load_before = os.getloadavg()
    kept = json.loads((RESULTS / "replicate_speed.json").read_text()) if args.plans_only else None
    with tempfile.TemporaryDirectory() as folder:
        configs = {}
        for name in CONFIGS:
            path = Path(folder) / name / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(CONFIGS[name]))
            configs[name] = str(path)
        if kept is None:
            for name in args.models.split(","):
                rows.append(_row(name, configs[name], args.skip_full_70b, args.repeat))
        previous = None
        if args.previous:
            (Path(folder) / "previous").mkdir()
            previous = (args.previous, _previous_package(args.previous, Path(folder) / "previous"))
        for name in [p for p in args.plans.split(",") if p]:
            repeat = args.seq_repeat or args.repeat if name.endswith("-seq") else args.repeat
            plans.append(_plan_row(name, configs, (repeat, min(repeat, args.previous_repeat or repeat)), previous))
    if kept is not None:  # the plans timed now replace theirs; the others are kept as they were
        timed = {p["plan"] for p in plans}
        plans = [p for p in kept.get("plans", []) if p["plan"] not in timed and p["plan"] in PLANS] + plans
        plans.sort(key=lambda p: list(PLANS).index(p["plan"]))
        dated = {
            "rows_date": kept.get("rows_date", kept["date"]),
            "rows_command": kept.get("rows_command", kept["command"]),
        }
        write_result("replicate_speed", {**{k: kept[k] for k in _KEPT if k in kept}, **dated, "plans": plans})
        return
    write_result(
        "replicate_speed",
        {
            "setup": (
                f"Llama-shaped, bf16 weights, AMP bf16, AdamW, gradient checkpointing, {TOKENS} tokens, batch 1, "
                "target H100"
            ),
            "targets_seconds": {"1b": 4, "8b": 10, "70b": 30},
            "repeat": args.repeat,
            # the machine's 1-minute load average before and after (2 cores, shared): the seconds are as loaded
            "load_average": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
            "rows": rows,
            "plans": plans,
        },
    )


# what --plans-only keeps of the results file: the model rows and how they were measured
_KEPT = ("setup", "targets_seconds", "repeat", "load_average", "rows", "rows_date", "rows_command")


if __name__ == "__main__":
    main()
