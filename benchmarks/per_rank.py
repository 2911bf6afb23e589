"""A rank's memory under DDP, ZeRO and FSDP2: what the report's per-rank formula says, and what a traced rank says,
against what a rank of a real sharded run holds.

The real run: world_size processes on the gloo backend (CPU tensors, 127.0.0.1), each wrapping its copy of the
model as the strategy does (DistributedDataParallel; + ZeroRedundancyOptimizer; fully_shard per block and at the
root) and measuring its live tensor bytes over its third (steady) training step with the storage tracker
(analysis.measure.gloo_ranks). The traced rank (rank 0): the same wrapping and steps on fake tensors under a fake
process group of the world size, in this process (analysis.trace.ranks.trace_rank), which the report now uses. The
formula (the report's fallback, and what it said before): the single-process trace's peak live bytes less what the
strategy's shares take off (Sharding.saving), i.e. the same tensor-level figure, without the allocator model's
rounding and workspaces.

    PYTHONPATH=. .venv/bin/python benchmarks/per_rank.py [--world-sizes 2 4] [--models mlp llama cnn]

The rows of the models and world sizes run replace theirs in results/per_rank.json; the other rows are kept, so
that one model can be measured again (or added) without measuring the others.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch

from _common import RESULTS, write_result
from gpumem_kernel.analysis import RandomBatch, RankSetup, Sharding, analyze, default_loss, measure_ranks, trace_rank

LLAMA_CONFIG = Path(__file__).resolve().parent.parent / "tests" / "data" / "hf_configs" / "llama" / "config.json"

BF16 = "bfloat16"
# (label, the rank's setup without its world size, the formula's strategy, the formula's amp)
SETTINGS: List[Tuple[str, Dict[str, Any], str, Optional[str]]] = [
    ("ddp", {"strategy": "ddp"}, "ddp", None),
    ("zero1 (DDP + ZeroRedundancyOptimizer)", {"strategy": "zero1"}, "zero1", None),
    ("zero2 (fully_shard, reshard_after_forward=False)", {"strategy": "zero2"}, "zero2", None),
    ("fsdp (fully_shard, reshard_after_forward=True)", {"strategy": "fsdp"}, "fsdp", None),
    ("fsdp bf16 (MixedPrecisionPolicy param_dtype=bf16)", {"strategy": "fsdp", "param_dtype": BF16}, "fsdp", "bf16"),
]


# settings a model's real ranks cannot run, and why (the model's rows leave them out)
UNRUNNABLE: Dict[Tuple[str, str], str] = {
    ("cnn", SETTINGS[4][0]): "FSDP2's bf16 policy casts BatchNorm's weight and bias but not its running statistics, "
    "and batch_norm refuses bf16 weights beside fp32 running statistics on the CPU (RuntimeError: expected scalar "
    "type BFloat16 but found Float); the traced rank refuses it too, in one line",
}


def mlp() -> torch.nn.Module:
    """Four blocks of 256 -> 1024 -> 256 (2.1 M parameters)."""
    torch.manual_seed(0)
    blocks = [
        torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)) for _ in range(4)
    ]
    return torch.nn.Sequential(*blocks)


def llama() -> torch.nn.Module:
    """tests/data/hf_configs/llama in fp32 (2 decoder layers, hidden 64, vocab 1000)."""
    import transformers

    config = transformers.LlamaConfig(**{**json.loads(LLAMA_CONFIG.read_text()), "torch_dtype": "float32"})
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).float()


class ConvBlock(torch.nn.Sequential):
    """Conv2d 32 -> 32 3x3, BatchNorm2d, ReLU: one repeated block (a unit of fully_shard)."""

    def __init__(self) -> None:
        super().__init__(torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU())


def cnn() -> torch.nn.Module:
    """A 3 -> 32 stem, four ConvBlocks on 32x32 images and a pooled linear head to 10 classes (38 k parameters,
    with BatchNorm's running statistics as buffers)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1),
        *[ConvBlock() for _ in range(4)],
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )


def models() -> Dict[str, Tuple[Any, RandomBatch, Dict[str, Any]]]:
    """name -> (builder, the rank's batch, analyze()'s input and batch size for the same batch)."""
    ids = torch.randint(0, 1000, (4, 64))
    tokens = {"input": {"input_ids": ids, "labels": ids}, "batch_size": 4}
    return {
        "mlp": (mlp, RandomBatch((16, 256)), {"input": (256,), "batch_size": 16}),
        "llama": (llama, RandomBatch((4, 64), vocab=1000), tokens),
        "cnn": (cnn, RandomBatch((8, 3, 32, 32)), {"input": (3, 32, 32), "batch_size": 8}),
    }


def formula(model: Any, keywords: Dict[str, Any], world_size: int, strategy: str, amp: Optional[str]) -> Dict[str, int]:
    """The per-rank figures of the formula (the report's fallback: the single-process trace's states at its peak
    divided by the strategy's shares, plus DDP's bucket copy or the largest layer gathered) and of the report as
    it is now (rank 0 traced): the peak live bytes less each one's saving, and the per-rank peak allocated."""
    alone = analyze(model, amp=amp, **keywords)
    ranked = analyze(model, amp=amp, world_size=world_size, strategy=strategy, **keywords)
    at_peak = alone.breakdown_at_peak or {}
    sharding = Sharding(world_size, strategy, alone.largest_layer["bytes"], alone.parameters_bytes)  # all trainable
    saving = sharding.saving(at_peak["parameter"], at_peak["gradient"], at_peak["optimizer_state"])
    traced_saving = alone.peak_allocated_bytes - ranked.peak_allocated_bytes
    return {
        "single_process_peak_live": alone.peak_live_bytes,
        "formula_peak_live": alone.peak_live_bytes - saving,
        "formula_peak_allocated": alone.peak_allocated_bytes - saving,
        "report_engine": ranked.distributed.engine,
        "report_peak_live": alone.peak_live_bytes - traced_saving,
        "report_peak_allocated": ranked.peak_allocated_bytes,
    }


def rows_for(name: str, world_size: int) -> List[Dict[str, Any]]:
    build, batch, keywords = models()[name]
    model = build()
    settings = [s for s in SETTINGS if (name, s[0]) not in UNRUNNABLE]
    setups = [RankSetup(world_size=world_size, **setup) for _, setup, _, _ in settings]
    started = time.perf_counter()
    measured = measure_ranks(model, setups, batch, default_loss, timeout=900)
    seconds = time.perf_counter() - started
    rows = []
    for (label, _, strategy, amp), setup, ranks in zip(settings, setups, measured):
        figures = formula(model, keywords, world_size, strategy, amp)
        traced = trace_rank(model, setup, batch, default_loss)
        peak = max(r.peak_live for r in ranks)
        rows.append(
            {
                "model": name,
                "world_size": world_size,
                "setting": label,
                "measured_peak_live": peak,
                "measured_min_peak_live": min(r.peak_live for r in ranks),
                "measured_start_live": max(r.start_live for r in ranks),
                "measured_peak_phase": ranks[0].peak_phase,
                "traced_peak_live": traced.peak_live,
                "traced_start_live": traced.start_live,
                "traced_peak_phase": traced.peak_phase,
                "traced_error": round(traced.peak_live / peak - 1, 4),
                "setup": setup.label(),
                **figures,
                "formula_error": round(figures["formula_peak_live"] / peak - 1, 4),
            }
        )
    print(f"{name} x {world_size}: {len(setups)} settings measured in {seconds:.0f} s")
    return rows


MODELS = ["mlp", "llama", "cnn"]


def merged(new: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows of the last result with those of the (model, world size) just measured replaced by the new ones,
    ordered by model (as MODELS lists them), world size, then setting as measured."""
    path = RESULTS / "per_rank.json"
    old = json.loads(path.read_text()).get("rows", []) if path.exists() else []
    fresh = {(r["model"], r["world_size"]) for r in new}
    rows = [r for r in old if (r["model"], r["world_size"]) not in fresh] + new
    order = {name: i for i, name in enumerate(MODELS)}
    return sorted(rows, key=lambda r: (order.get(r["model"], len(order)), r["world_size"]))


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    args = parser.parse_args()
    rows = merged([row for name in args.models for n in args.world_sizes for row in rows_for(name, n)])
    print(f"{'model':6} {'N':>2} {'setting':52} {'measured':>9} {'formula':>8} {'error':>7} {'traced':>8} {'error':>7}")
    for r in rows:
        print(
            f"{r['model']:6} {r['world_size']:>2} {r['setting']:52} {_mib(r['measured_peak_live']):>9} "
            f"{_mib(r['formula_peak_live']):>8} {r['formula_error']:>+7.1%} {_mib(r['traced_peak_live']):>8} "
            f"{r['traced_error']:>+7.2%}"
        )
    write_result(
        "per_rank",
        {
            "what": "a rank's peak live tensor bytes (MiB in the printed table) over its third training step: "
            "measured on gloo CPU ranks (the largest rank; min too), against the report's per-rank formula (the "
            "single-process trace less the sharding's saving) and a rank traced on fake tensors under a fake "
            "process group",
            "optimizer": "adamw (foreach)",
            "not_run": [{"model": m, "setting": label, "why": why} for (m, label), why in UNRUNNABLE.items()],
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
