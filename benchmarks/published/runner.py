"""Each published row's settings, analysed: analyze() on the model built from its config (no download), with the
torch rules, optimizer and stack of the published run; predicted vs published, reserved and process total."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

from benchmarks.published import source_hf as hf

MiB = 1 << 20
# bitsandbytes of January 2022 (0.26): blocksize 2048 (< 0.44) and parameters under 4096 elements in 32 bits
# (< 0.43.2): analysis/trace/modelled_optimizers.py, OLD_BLOCKSIZE and OLD_FP32_BELOW, with their commits
BNB_OF_THAT_TIME = dict(states=2, blocksize=2048, fp32_below=4096)
LR = 5e-5  # TrainingArguments.learning_rate's default


def bert(config: Optional[Dict[str, Any]] = None) -> Any:
    """BertForSequenceClassification from a written-out config, eager attention (the only one of 2022)."""
    from transformers import BertConfig, BertForSequenceClassification

    model = BertForSequenceClassification(BertConfig(**(config or hf.BERT_LARGE), attn_implementation="eager"))
    return model.train()


def batches(vocab: int, sequence: int = hf.SEQUENCE) -> Callable[[int], Dict[str, Any]]:
    """The page's dummy data: token ids in [100, 30000) (below the vocabulary), binary labels; no mask, as the
    page's Dataset had none (BERT makes an all-ones one)."""

    def make(batch_size: int) -> Dict[str, Any]:
        import torch

        ids = torch.randint(min(100, vocab - 1), min(30000, vocab), (batch_size, sequence))
        return {"input_ids": ids, "labels": torch.zeros(batch_size, dtype=torch.long)}

    return make


def optimizer(kind: str, model: Any) -> Any:
    """The optimizer the run's Trainer (transformers 4.15/4.16) used, over the model's parameters."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if kind == "adamw_hf":
        # transformers.optimization.AdamW (gone from today's transformers): a for-loop AdamW, as torch 1.10's
        # torch.optim.AdamW also was; foreach=False keeps the per-parameter temporaries
        return torch.optim.AdamW(params, lr=LR, weight_decay=0.0, foreach=False)
    if kind == "adafactor":
        from transformers.optimization import Adafactor

        # Trainer.create_optimizer for optim="adafactor": scale_parameter=False, relative_step=False
        return Adafactor(params, lr=LR, scale_parameter=False, relative_step=False)
    if kind == "Adam8bit":
        from gpumem_kernel.analysis import BnbSettings, planned_bitsandbytes

        return planned_bitsandbytes(params, BnbSettings(**BNB_OF_THAT_TIME), "Adam8bit", LR, 0.0)
    raise ValueError(f"unknown optimizer {kind!r}")


def analyse(model: Any, row: hf.Row, vocab: int, sequence: int = hf.SEQUENCE) -> Any:
    from gpumem_kernel.analysis import analyze

    return analyze(
        model,
        batch_size=row.batch,
        input=batches(vocab, sequence),
        optimizer=optimizer(row.optim, model),
        amp="fp16" if row.fp16 else None,
        grad_accum=row.accum,
        checkpointing=row.checkpointing,
        keep_grads=True,  # the Trainer's model.zero_grad() of torch 1.10: set_to_none=False
        target=hf.GPU,
        torch_version=hf.TORCH,
        cuda_version=hf.CUDA,
    )


def relative_error(predicted: float, published: float) -> float:
    """(predicted - published) / published, to 4 places: every source's rows give their error this way."""
    return round((predicted - published) / published, 4)


def bnb_rule(version: str, applied: bool) -> str:
    """The bitsandbytes rules a row was planned with, by name ('' where none applied)."""
    from gpumem_kernel.analysis import bnb_rules_for

    return f"bitsandbytes {version}: " + ", ".join(r.name for r in bnb_rules_for(version)) if applied else ""


def compare(row: hf.Row, report: Any, seconds: float) -> Dict[str, Any]:
    reserved = int(report.peak_reserved_bytes or 0)
    total = int(report.peak_bytes)
    published_reserved = row.published_mib - hf.CONTEXT_MIB
    return {
        "row": row.name,
        "published_mib": row.published_mib,
        "published_reserved_mib": published_reserved,
        "predicted_reserved_mib": round(reserved / MiB, 1),
        "predicted_total_mib": round(total / MiB, 1),
        "predicted_context_mib": round(report.context_bytes / MiB, 1),
        "reserved_error": relative_error(reserved / MiB, published_reserved),
        "total_error": relative_error(total / MiB, row.published_mib),
        "settings": {**row.settings(), "keep_grads": True, "attention": "eager", "target": hf.GPU},
        "torch_rules": [n for n in report.notes if n.startswith(f"torch {hf.TORCH}: rule")],
        "context_basis": report.device.context_basis,
        "seconds": round(seconds, 1),
        "source": hf.URL,
    }


def run(rows: List[hf.Row], config: Optional[Dict[str, Any]] = None, sequence: int = hf.SEQUENCE) -> List[Dict]:
    model = bert(config)
    vocab = model.config.vocab_size
    out = []
    for row in rows:
        started = time.perf_counter()
        report = analyse(model, row, vocab, sequence)
        out.append(compare(row, report, time.perf_counter() - started))
        print(_line(out[-1]), flush=True)
    return out


def _line(r: Dict[str, Any]) -> str:
    return (
        f"{r['row']:<20} published {r['published_mib']:>6} MiB (reserved {r['published_reserved_mib']:>6}) | "
        f"predicted reserved {r['predicted_reserved_mib']:>8.1f} ({r['reserved_error']:+.1%}), "
        f"total {r['predicted_total_mib']:>8.1f} ({r['total_error']:+.1%}) | {r['seconds']} s"
    )


def run_seminar(rows: List[Any]) -> List[Dict[str, Any]]:
    """The course notebook's runs (source_seminar): each row's own step traced on each GPU it may have run on;
    predicted = the trace's peak allocated + the resident batches, vs max_memory_allocated()."""
    import torch

    from benchmarks.published import source_seminar as sem
    from gpumem_kernel.analysis import trace_step

    out = []
    for row in rows:
        started = time.perf_counter()
        predicted: Dict[str, float] = {}
        for gpu in sem.GPUS:
            net = sem.model(row.precision)
            report = trace_step(
                sem.step(row),
                net,
                torch.optim.SGD(net.parameters(), lr=0.001),
                batch_size=sem.BATCH,
                input=sem.make_batch,
                target=gpu,
                torch_version=sem.TORCH,
                cuda_version=sem.CUDA,
            )
            predicted[gpu] = (int(report.peak_allocated_bytes) + sem.resident_bytes()) / 1e6
        out.append(
            {
                "row": row.name,
                "published_mb": row.published_mb,
                "predicted_allocated_mb": {gpu: round(mb, 1) for gpu, mb in predicted.items()},
                "allocated_error": {gpu: relative_error(mb, row.published_mb) for gpu, mb in predicted.items()},
                "settings": row.settings(),
                "seconds": round(time.perf_counter() - started, 1),
                "source": sem.URL,
            }
        )
        errors = ", ".join(f"{gpu} {e:+.1%}" for gpu, e in out[-1]["allocated_error"].items())
        print(f"{row.name:<32} published {row.published_mb:>5} MB | predicted allocated: {errors}", flush=True)
    return out
