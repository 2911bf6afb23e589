"""A traced report's error bound is what the GPU run measured for steps like the one analysed: the figures in
analysis.report.gpu_accuracy are those of benchmarks/results/gpu_estimator.json, and a step's convolutions (fp32 or
bf16) and LSTMs pick the figures it is told."""

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from gpumem_kernel.analysis.pipeline.analyze import analyze  # noqa: E402
from gpumem_kernel.analysis.report.gpu_accuracy import (  # noqa: E402
    LIBRARY_MODULES_MIB,
    MEASURED_ENGINE_ALLOCATED,
    MEASURED_KINDS,
    MEASURED_ON,
    traced_bound,
)
from gpumem_kernel.analysis.trace.tracker import CONVOLUTION, FP32_CONVOLUTION, LSTM  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu_estimator.json"
# the suite's models (benchmarks/gpu/models.py) that run convolutions or an LSTM; the rest run neither
_CONV_ARCHS = {"ResNet-50", "ResNet-18/4", "EfficientNet-B0", "U-Net", "CNN", "ViT-B/16", "ViT-tiny"}
_PLAIN_ARCHS = {"MLP", "GPT-2", "BERT-base", "BERT-mini", "nanoGPT"}


def _kind(row: Dict[str, Any]) -> Any:
    if row["arch"] == "LSTM":
        return LSTM
    if row["arch"] in _CONV_ARCHS:
        return FP32_CONVOLUTION if row["precision"] == "fp32" else CONVOLUTION
    return None


def test_the_table_is_what_the_gpu_run_measured() -> None:
    run = json.loads(RESULTS.read_text())
    machine = run["machine"]
    assert run["device"] == "cuda" and run["dry_run"] is False
    cudnn = f"{machine['cudnn'] // 10000}.{machine['cudnn'] // 100 % 100}"
    said = (machine["gpu"].split()[-1], f"torch {machine['torch'].split('+')[0]}", machine["torch_cuda"], cudnn)
    assert all(part in MEASURED_ON for part in said), (MEASURED_ON, said)
    assert MEASURED_ENGINE_ALLOCATED == round(run["measured_engine_summary"]["allocated"]["max_abs"], 4)
    rows = [r for r in run["rows"] if r["status"] == "ok" and r["allocator"] == "default"]
    assert {r["arch"] for r in rows} == _CONV_ARCHS | _PLAIN_ARCHS | {"LSTM"}
    by_kind: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_kind[_kind(row)].append(row)
    assert {k.op_kind for k in MEASURED_KINDS} == set(by_kind)
    for kind in MEASURED_KINDS:
        mine = by_kind[kind.op_kind]
        assert kind.steps == len(mine), kind
        for peak in ("allocated", "reserved"):
            errors = [r["error"][peak] for r in mine]
            assert getattr(kind, peak) == (round(min(errors), 4), round(max(errors), 4)), (kind, peak)
    starts = {run["context_measured_at_start"][r["arch"]] for r in rows}
    assert len(starts) == 1  # every model's process held the same context before its steps
    modules = [(r["truth"]["process_minus_reserved"] - min(starts)) >> 20 for r in rows]
    assert LIBRARY_MODULES_MIB == (min(modules), max(modules))


def test_every_measured_step_falls_within_the_bound_its_kind_states() -> None:
    run = json.loads(RESULTS.read_text())
    bounds = {k.op_kind: k.bound() for k in MEASURED_KINDS}
    for row in run["rows"]:
        if row["status"] == "ok" and row["allocator"] == "default":
            bound = bounds[_kind(row)]
            assert abs(row["error"]["allocated"]) <= bound and abs(row["error"]["reserved"]) <= bound, row


def test_the_statement_says_each_kind_the_step_ran() -> None:
    relative, statement = traced_bound({FP32_CONVOLUTION, LSTM})
    assert relative == 0.57 and "±57%" in statement
    assert "fp32 convolutions" in statement and "from 37% below to 1% above the real peak allocated" in statement
    assert "up to 57% below the peak reserved" in statement
    assert "LSTM" in statement and "from 17% below to 16% above the real peak allocated" in statement
    assert "without convolutions" not in statement
    plain_relative, plain = traced_bound(frozenset())
    assert plain_relative == 0.21 and "without convolutions or LSTMs" in plain and "±21%" in plain


class _Convs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(8, 10)

    def forward(self, x: Any) -> Any:
        return self.head(self.body(x))


class _Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x: Any) -> Any:
        return self.head(self.lstm(x)[0][:, -1])


@pytest.mark.parametrize(
    "model, options, told, relative",
    [
        (_Convs, {"input": (3, 32, 32)}, "with fp32 convolutions", 0.57),
        (_Convs, {"input": (3, 32, 32), "amp": "bf16"}, "with bf16 convolutions", 0.18),
        (_Recurrent, {"input": (12, 16)}, "with an LSTM", 0.32),
        (lambda: nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)), {}, "without convolutions", 0.21),
    ],
    ids=["convnet-fp32", "convnet-bf16", "lstm", "mlp"],
)
def test_a_traced_report_states_the_bound_measured_for_its_kind_of_step(
    model: Any, options: Dict[str, Any], told: str, relative: float
) -> None:
    report = analyze(model(), batch_size=8, target="H100 80GB", **options)
    assert report.engine == "traced"
    assert report.error_bound.relative == relative
    assert told in report.error_bound.statement and f"±{relative:.0%}" in report.error_bound.statement
    assert "libraries' modules are not counted" in report.error_bound.statement  # a target's context is estimated
