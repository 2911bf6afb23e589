"""Energy per sample in `%gpumem benchmark`: NVML's counter (a fake driver) or power × time where a GPU has no
counter, the "most energy-efficient" pick beside the three picks, and one line saying energy is not measured on
a CPU run."""

from __future__ import annotations

import json
import time
from importlib import resources

import jsonschema
import pytest

from fake_nvml import FakeGpu, FakeNvml, pre_volta
from gpumem_kernel.benchmark.picks import pick_configurations
from gpumem_kernel.benchmark.report import benchmark_bundle
from gpumem_kernel.benchmark.result import BenchmarkResult, BenchmarkRow
from gpumem_kernel.benchmark.sweep import _energy_note
from gpumem_kernel.benchmark.utilisation import UtilSampler
from gpumem_kernel.probe.nvml import Nvml
from gpumem_kernel.probe.power import ESTIMATED, NO_COUNTER

GiB = 1 << 30


def measured(gpu: FakeGpu, seconds: float = 0.12) -> UtilSampler:
    sampler = UtilSampler(0, interval=0.02, source=(Nvml(FakeNvml([gpu])), gpu))
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return sampler


def test_the_energy_of_the_measured_steps_is_the_counters_difference_at_the_gpus_draw():
    energy = measured(FakeGpu("NVIDIA A100", "GPU-a", power_mw=300_000)).energy()
    assert energy is not None and energy.note is None
    assert energy.mean_watts == pytest.approx(300, rel=0.05)  # the fake's counter grows at 300 W
    assert energy.joules == pytest.approx(300 * energy.seconds, rel=0.05)


def test_without_a_counter_it_is_power_times_time_and_says_so():
    sampler = measured(pre_volta("Tesla P100", "GPU-p", power_mw=200_000))
    energy = sampler.energy()
    assert energy is not None and energy.note == ESTIMATED and sampler.power_note == NO_COUNTER
    assert energy.mean_watts == 200.0 and energy.joules > 0


def row(batch: int, sps: float, joules: float | None, peak: int = GiB) -> BenchmarkRow:
    return BenchmarkRow(
        batch,
        2,
        False,
        False,
        "ok",
        total_ms=1000 * batch / sps,
        samples_per_s=sps,
        peak_bytes=peak,
        efficiency=sps / (peak / GiB),
        energy_per_sample_j=joules,
        mean_power_w=None if joules is None else round(joules * sps, 1),
    )


def result(rows, engine="cuda", notes=()) -> BenchmarkResult:
    return BenchmarkResult(
        engine=engine,
        device={"type": "cuda", "index": 0, "name": "NVIDIA A100", "total_bytes": 16 * GiB},
        limit_bytes=16 * GiB,
        memory_target=0.8,
        memory_source="torch.cuda.max_memory_reserved",
        amp_dtype="float16",
        config={
            "batch_sizes": [16, 32, 64],
            "num_workers_options": [2],
            "steps_per_test": 2,
            "warmup_steps": 1,
            "test_mixed_precision": False,
            "test_pin_memory": False,
            "memory_target": 0.8,
        },
        model={"name": "Net", "parameter_count": 10},
        optimizer="adamw",
        data="synthetic 3x16x16",
        rows=rows,
        picks=pick_configurations(rows, 16 * GiB, 0.8),
        diagnostics=[],
        notes=list(notes),
        interrupted=False,
        seconds=1.0,
        workers={"leftover": [], "terminated": []},
    )


def test_the_most_energy_efficient_pick_is_the_lowest_energy_per_sample_and_every_row_shows_its_energy():
    rows = [row(16, 800.0, 0.40), row(32, 1500.0, 0.21), row(64, 1600.0, 0.25, peak=14 * GiB)]
    done = result(rows, notes=[_energy_note("cuda", rows, [])])
    bundle = benchmark_bundle(done)
    payload = bundle["application/vnd.gpumem.benchmark.v1+json"]
    schema = json.loads(resources.files("gpumem_kernel").joinpath("wire/schemas/benchmark.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(payload)
    green = payload["picks"]["most_energy_efficient"]
    assert (green["row"], green["energy_per_sample_j"]) == (1, 0.21)
    assert payload["picks"]["highest_throughput"]["row"] == 2  # the fastest is not the most efficient here
    text = bundle["text/plain"]
    assert "J/sample" in text and " 210 mJ " in text and " 400 mJ " in text
    assert "Most Energy-Efficient:" in text and "Energy:             210 mJ per sample (mean 315 W)" in text
    assert "energy per sample: the whole GPU over the measured steps (every process on it), NVML's energy counter" in (
        text
    )
    assert ">J/sample</th>" in bundle["text/html"] and "Most energy-efficient: batch 32" in bundle["text/html"]


def test_a_cpu_run_says_in_one_line_that_energy_is_not_measured():
    rows = [row(16, 800.0, None), row(32, 900.0, None)]
    text = benchmark_bundle(result(rows, engine="cpu", notes=[_energy_note("cpu", rows, [])]))["text/plain"]
    assert result(rows, engine="cpu").picks["most_energy_efficient"] is None
    assert "J/sample" not in text and "Energy-Efficient" not in text
    assert [line for line in text.splitlines() if "energy" in line.lower()] == [
        "  - energy is not measured: NVML reads GPUs, and this run was on the CPU"
    ]
    assert _energy_note("cuda", rows, ["no energy counter and no power reading: energy unknown"]) == (
        "energy is not measured: no energy counter and no power reading: energy unknown"
    )
    assert _energy_note("cuda", [row(8, 10.0, 1.0)], [ESTIMATED]).endswith(ESTIMATED)
