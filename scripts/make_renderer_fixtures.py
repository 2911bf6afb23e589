"""Regenerate the renderer fixtures (src/__tests__/fixtures/*.json) from real runs of small torch models.

CPU only: the analysis uses the traced engine (planning targets / --memory), autobatch and benchmark the
simulated engine. Run from the repository root:

    PYTHONPATH=. .venv/bin/python scripts/make_renderer_fixtures.py [OUT_DIR]

Timings (benchmark rows, trial seconds) differ between runs; the tests only rely on the structure and on
numbers read back from the fixtures themselves.
"""

import json
import os
import sys
import tempfile

import torch
import torch.nn as nn

from gpumem_kernel.analysis.pipeline.analyze import analyze
from gpumem_kernel.analysis.pipeline.model_source import analyze_named
from gpumem_kernel.autobatch.search import auto_select_batch_size
from gpumem_kernel.benchmark.sweep import run_benchmark

OUT = (
    sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src", "__tests__", "fixtures")
)
HOSTILE = "<img src=x onerror=alert(1)>"
HF_CONFIGS = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "hf_configs")


def save(name, payload):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(payload, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(name, "ok")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(4)
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.head(self.conv(x))


torch.manual_seed(0)
save(
    "analysis_target.json",
    analyze(
        Net(),
        batch_size=32,
        input="3x64x64",
        optimizer="adamw",
        amp="bf16",
        target="RTX 4080 Super",
        effective_batch=256,
    ).to_payload(),
)


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(64, 10),
        )

    def forward(self, x):
        return self.body(x)


save(
    "analysis_accum.json",
    analyze(
        Wide(),
        batch_size=64,
        input="3x128x128",
        optimizer="adam",
        amp="fp16",
        memory="3GiB",
        effective_batch=2048,
        multiple=8,
    ).to_payload(),
)

save(
    "analysis_nogpu.json",
    analyze(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)),
        batch_size=16,
        input="32",
        optimizer="sgd-momentum",
    ).to_payload(),
)

Hostile = type(HOSTILE, (nn.Module,), {"forward": lambda self, x: self.out(getattr(self, HOSTILE)(x).relu())})
h = Hostile()
h.add_module(HOSTILE, nn.Linear(16, 512))
h.add_module("out", nn.Linear(512, 2))
save("analysis_hostile.json", analyze(h, batch_size=8, input="16", target="RTX 3060").to_payload())


def large_vocabulary_llama() -> str:
    """The shipped 2-layer Llama config with a 32,000-token vocabulary: the logits dominate its step."""
    with open(os.path.join(HF_CONFIGS, "llama", "config.json")) as f:
        config = json.load(f)
    config["vocab_size"] = 32_000
    path = os.path.join(tempfile.mkdtemp(), "config.json")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


# a QLoRA plan (nf4, LoRA r=8, checkpointing, bf16) with the longest sequence at batches 1 and 4 (~15 s)
save(
    "analysis_llm.json",
    analyze_named(
        large_vocabulary_llama(),
        batch_size=2,
        seq=128,
        memory="2GiB",
        amp="bf16",
        checkpointing=True,
        quantize="nf4",
        lora="r=8",
        search="seq",
        seq_batches="1,4",
    ).to_payload(),
)

mlp = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 256), nn.ReLU(), nn.Linear(256, 10))
save("autobatch_simulated.json", auto_select_batch_size(mlp, input="3x32x32", simulate="64MiB").to_payload())
save(
    "autobatch_scan.json",
    auto_select_batch_size(
        mlp, input="3x32x32", simulate="48MiB", predict=False, start_batch=64, multiple=8, margin=0.2
    ).to_payload(),
)

save(
    "benchmark_simulated.json",
    run_benchmark(
        mlp,
        synthetic_shape="3x32x32",
        num_classes=10,
        batch_sizes=[16, 64, 256, 1024, 4096],
        num_workers=[0, 2],
        steps=3,
        warmup_steps=1,
        simulate="64MiB",
    ).to_payload(),
)
seen = []


def stop_after_three(row):
    seen.append(row)
    if len(seen) == 3:
        raise KeyboardInterrupt


save(
    "benchmark_interrupted.json",
    run_benchmark(
        mlp,
        synthetic_shape="3x32x32",
        num_classes=10,
        batch_sizes=[16, 64, 256],
        num_workers=[0],
        steps=2,
        warmup_steps=1,
        simulate="64MiB",
        on_row=stop_after_three,
    ).to_payload(),
)
