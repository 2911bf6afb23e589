"""Row 12: what the holders walk after each cell costs (issue 27), against its 50 ms budget.

The post_run_cell hook walks the user's variables where CUDA is in use. Here the namespace holds 10,000 objects
(numbers and strings, small lists and dicts, dataclasses, plain objects, lists of tensors) and a ~1.1B-parameter
decoder on the meta device with Adam-shaped state (no memory: the walk's cost is in the objects, not their
bytes). The same code path as on CUDA: `collect` with a device predicate accepting meta tensors. Also timed:
the hook in a kernel without CUDA in use (one sys.modules look per cell).

    PYTHONPATH=. .venv/bin/python benchmarks/holders_cost.py [--repeats 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
import timeit
import types
from typing import Any, Dict, List

import torch

from _common import write_result
from gpumem_kernel.heldby import hook
from gpumem_kernel.heldby.collect import DEFAULT_BUDGET_MS, collect


@dataclasses.dataclass
class Record:
    name: str
    score: float
    tags: List[str]


class Plain:
    def __init__(self, i: int) -> None:
        self.index, self.label, self.values = i, f"item {i}", [i, i + 1]


def decoder(layers: int = 20, width: int = 2048, vocab: int = 50_000) -> torch.nn.Module:
    """~1.1B parameters on the meta device: embedding, attention and MLP projections per block."""
    with torch.device("meta"):
        blocks = [
            torch.nn.ModuleDict(
                {
                    "attn": torch.nn.Linear(width, 4 * width),
                    "norm": torch.nn.LayerNorm(width),
                    "up": torch.nn.Linear(width, 4 * width),
                    "down": torch.nn.Linear(4 * width, width),
                }
            )
            for _ in range(layers)
        ]
        return torch.nn.Sequential(torch.nn.Embedding(vocab, width), *blocks)


def namespace(objects: int = 10_000) -> Dict[str, Any]:
    """`objects` variables: a tenth each of lists, dicts, dataclasses and plain objects, a hundredth lists of
    tensors, the rest numbers and strings."""
    ns: Dict[str, Any] = {}
    for i in range(objects):
        kind = i % 100
        if kind < 10:
            ns[f"list_{i}"] = [float(i), i, str(i)]
        elif kind < 20:
            ns[f"dict_{i}"] = {"i": i, "name": str(i), "nested": [i]}
        elif kind < 30:
            ns[f"record_{i}"] = Record(str(i), i / 3, ["a", "b"])
        elif kind < 40:
            ns[f"plain_{i}"] = Plain(i)
        elif kind == 40:
            ns[f"tensors_{i}"] = [torch.empty(16, device="meta") for _ in range(4)]
        else:
            ns[f"value_{i}"] = i if kind % 2 else f"text {i}"
    return ns


def shell_with(ns: Dict[str, Any]) -> Any:
    return types.SimpleNamespace(user_ns=ns, user_ns_hidden={})


def timed(shell: Any, repeats: int, budget_ms: Any) -> Dict[str, Any]:
    on_meta = lambda tensor: tensor.device.type == "meta"  # noqa: E731 - the hook's predicate is "is CUDA"
    costs, skipped, report = [], 0, None
    for _ in range(repeats):
        started = time.perf_counter()
        report = collect(shell, on_meta, "meta", None, budget_ms)
        costs.append((time.perf_counter() - started) * 1000)
        skipped += report.skipped
    assert report is not None
    return {
        "median_ms": round(statistics.median(costs), 2),
        "max_ms": round(max(costs), 2),
        "min_ms": round(min(costs), 2),
        "skipped": skipped,  # of `repeats` walks
        "entries": len(report.entries),
        "largest": [[e.name, e.bytes, e.description] for e in report.entries[:3]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = decoder()
    optimizer = torch.optim.Adam(model.parameters())
    for parameter in model.parameters():  # Adam's state after a step, shaped like the parameters
        optimizer.state[parameter] = {
            "step": torch.tensor(1.0),
            "exp_avg": torch.empty_like(parameter),
            "exp_avg_sq": torch.empty_like(parameter),
        }
    parameters = sum(p.numel() for p in model.parameters())
    ns = namespace()
    objects = len(ns)
    rows = []
    for label, extra in (
        ("10,000 objects", {}),
        ("model + Adam state", {"model": model, "optimizer": optimizer}),
        ("10,000 objects + model + Adam state", {"model": model, "optimizer": optimizer}),
    ):
        space = dict(ns) if label.startswith("10,000") else {}
        space.update(extra)
        shell = shell_with(space)
        row = {"namespace": label, "variables": len(space)}
        row["unbounded"] = timed(shell, args.repeats, None)
        row["with_budget"] = timed(shell, args.repeats, DEFAULT_BUDGET_MS)
        rows.append(row)
        print(row)
    no_cuda = timeit.Timer(lambda: hook.after_cell(shell_with(ns))).repeat(repeat=7, number=10_000)
    no_cuda_us = round(min(no_cuda) / 10_000 * 1e6, 3)
    print(f"hook without CUDA in use: {no_cuda_us} µs per cell")
    write_result(
        "holders_cost",
        {
            "description": "the holders walk after each cell: 10,000 objects and a ~1.1B-parameter model "
            "(meta device, Adam-shaped state), against the per-cell budget",
            "budget_ms": DEFAULT_BUDGET_MS,
            "objects": objects,
            "model_parameters": parameters,
            "model_tensors": len(list(model.parameters())),
            "repeats": args.repeats,
            "rows": rows,
            "hook_without_cuda_us": no_cuda_us,
            "load_average": [round(n, 2) for n in os.getloadavg()],  # a shared machine: the figures' context
        },
    )


if __name__ == "__main__":
    main()
