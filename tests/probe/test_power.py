"""Power draw, power limit and energy from a fake NVIDIA driver: in every sample, per cell, and where NVML lacks
the energy counter (before Volta) or power altogether."""

from __future__ import annotations

import pytest

from fake_nvml import NVML_ERROR_GPU_IS_LOST, NVML_ERROR_NOT_SUPPORTED, FakeGpu, FakeMig, FakeNvml, pre_volta
from gpumem_kernel.magics.gpumem import CellReport, cell_bundle
from gpumem_kernel.probe.nvml import Nvml
from gpumem_kernel.probe.power import ENERGY, ESTIMATED, MIG_NOTE, NO_COUNTER, PowerReader, energy_between, span_energy
from gpumem_kernel.render.units import format_watt_hours, format_watts
from gpumem_kernel.wire.protocol import validate

UUID0 = "GPU-8f3a1111-2222-3333-4444-555555555555"
UUID1 = "GPU-8f3b6666-7777-8888-9999-000000000000"
MIG_UUID = "MIG-1c2d3e4f-aaaa-bbbb-cccc-dddddddddddd"


def devices(sample: dict) -> list:
    return sample["gpu"]["devices"]


def test_each_sample_has_power_limit_and_the_energy_counter_or_why_not(make_prober):
    gpus = [FakeGpu("NVIDIA A100-SXM4-80GB", UUID0, migs=[FakeMig(MIG_UUID, 1, 0)]), pre_volta("Tesla P100", UUID1)]
    sample = make_prober(gpus, env={"CUDA_VISIBLE_DEVICES": f"{MIG_UUID},1"})().to_dict()

    volta, mig, pascal = devices(sample)
    assert (volta["power_mw"], volta["power_limit_mw"], volta["power_note"]) == (250_000, 320_000, None)
    assert volta["energy_mj"] >= 7_200_000
    assert mig["mig"] and mig["power_mw"] is None and mig["energy_mj"] is None and mig["power_note"] == MIG_NOTE
    assert (pascal["power_mw"], pascal["energy_mj"], pascal["power_note"]) == (250_000, None, NO_COUNTER)
    assert sample["errors"] == []  # a figure NVML does not have is a note on the device, not an error
    validate(sample)


def test_an_unsupported_function_is_asked_once_and_other_failures_are_named():
    gpu = FakeGpu("NVIDIA GeForce GTX 1080", UUID0, fail={"nvmlDeviceGetPowerUsage": NVML_ERROR_NOT_SUPPORTED})
    gpu.fail[ENERGY] = NVML_ERROR_NOT_SUPPORTED
    fake = FakeNvml([gpu])
    reader = PowerReader(Nvml(fake))
    first = reader.read("0", gpu)
    second = reader.read("0", gpu)
    assert first == second and first.power_mw is None and first.limit_mw == 320_000
    assert first.note == (
        "no power reading: not supported by NVML on this GPU; no energy counter and no power reading: energy unknown"
    )
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1 and fake.calls[ENERGY] == 1
    lost = FakeGpu("NVIDIA A100", UUID1, fail={ENERGY: NVML_ERROR_GPU_IS_LOST})
    reading = PowerReader(Nvml(FakeNvml([lost]))).read("1", lost)
    assert reading.energy_mj is None and reading.note == (
        "no energy counter: nvmlDeviceGetTotalEnergyConsumption: GPU is lost"
    )


def test_energy_is_the_counters_difference_or_power_times_time_with_a_note():
    by_counter = energy_between([(100.0, 1_000_000, 200_000), (110.0, 4_600_000, 400_000)])
    assert (by_counter.joules, by_counter.mean_watts, by_counter.note) == (3600.0, 360.0, None)
    # no counter: trapezoids over the power readings, and it says so
    by_power = energy_between([(0.0, None, 100_000), (1.0, None, 300_000), (3.0, None, 300_000)])
    assert (by_power.joules, by_power.mean_watts, by_power.note) == (800.0, pytest.approx(266.67, 0.01), ESTIMATED)
    nothing = energy_between([(0.0, None, None), (5.0, None, None)])
    assert nothing.joules is None and nothing.note == "no energy counter and too few power readings"


def _sample(time: float, *figures: tuple) -> dict:
    """A sample dict with one whole GPU per (cuda index, energy mJ, power mW, note)."""
    found = [
        {"nvml_index": i, "cuda_index": i, "mig": False, "energy_mj": e, "power_mw": p, "power_note": n}
        for i, e, p, n in figures
    ]
    return {"time": time, "gpu": {"devices": found}}


def test_a_cells_energy_per_gpu_uses_the_samples_between_where_there_is_no_counter():
    start = _sample(0.0, (0, 0, 100_000, None), (1, None, 100_000, NO_COUNTER), (2, None, None, "no power"))
    middle = _sample(1.0, (0, 150_000, 200_000, None), (1, None, 200_000, NO_COUNTER), (2, None, None, "no power"))
    end = _sample(2.0, (0, 360_000, 220_000, None), (1, None, 100_000, NO_COUNTER), (2, None, None, "no power"))
    first, second, third = span_energy(start, [middle], end)
    assert (first.device, first.energy.joules, first.energy.mean_watts, first.energy.note) == ("cuda:0", 360, 180, None)
    assert (second.energy.joules, second.energy.note) == (300.0, ESTIMATED)
    assert third.energy.joules is None and third.reason == "no power"
    assert [e.device for e in span_energy(start, [middle], end, cuda_index=1)] == ["cuda:1"]
    assert span_energy({"time": 0.0, "gpu": {"devices": []}}, [], end) == []  # no GPU: nothing to say


def test_the_cell_report_shows_energy_in_wh_and_mean_power():
    start = _sample(0.0, (0, 0, 250_000, None), (1, None, 150_000, NO_COUNTER), (2, None, None, "no power <b>"))
    end = _sample(4.0, (0, 1_000_000, 250_000, None), (1, None, 150_000, NO_COUNTER), (2, None, None, "no power <b>"))
    report = CellReport([], 0, 4.0, False, span_energy(start, [], end))
    bundle = cell_bundle(report)
    lines = bundle["text/plain"].splitlines()
    assert lines[-3] == "  cuda:0   energy 0.2778 Wh, mean power 250 W (NVML, the whole GPU: every process on it)"
    assert lines[-2] == (
        "  cuda:1   energy 0.1667 Wh, mean power 150 W (NVML, the whole GPU: every process on it; "
        "from power readings × time: this GPU has no energy counter)"
    )
    assert lines[-1] == "  cuda:2   energy n/a, mean power n/a (not measured: no power <b>)"
    page = bundle["text/html"]
    assert "no power &lt;b&gt;" in page and "<th style='text-align:left'>energy</th>" in page


def test_one_formatter_for_watts_and_watt_hours():
    assert [format_watts(w) for w in (None, 8.46, 99.44, 250.4)] == ["n/a", "8.5 W", "99.4 W", "250 W"]
    assert [format_watt_hours(j) for j in (None, 50, 3600 * 2.5, 3600 * 12.34, 3600 * 1250)] == [
        "n/a",
        "0.0139 Wh",
        "2.50 Wh",
        "12.3 Wh",
        "1.25 kWh",
    ]


def test_the_cell_magic_reports_each_gpus_energy_from_the_fake_driver():
    """%%gpumem in the shared shell with the extension's prober reading a fake driver: one GPU with the counter,
    one before Volta (power × time over the sampler's samples, and the note)."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from fake_nvml import install_in_running_kernel
    from gpumem_kernel.probe import prober as probe

    shell = InteractiveShell.instance()  # shared between test modules: left as it was found
    before = set(shell.user_ns)
    shell.extension_manager.load_extension("gpumem_kernel")
    try:
        install_in_running_kernel([FakeGpu("NVIDIA A100", UUID0), pre_volta("Tesla P100", UUID1, power_mw=120_000)])
        with capture_output() as captured:
            shell.run_cell("%%gpumem\nimport time\ntime.sleep(0.3)")
    finally:
        probe.default_prober().__init__()  # back to the real driver (none here)
        shell.extension_manager.unload_extension("gpumem_kernel")
        for name in set(shell.user_ns) - before:
            del shell.user_ns[name]
    lines = captured.outputs[0].data["text/plain"].splitlines()
    energy = [line.split(" (")[0] for line in lines if " energy " in line]
    assert [line.split()[0] for line in energy] == ["cuda:0", "cuda:1"]
    watts = [float(line.rsplit("mean power ", 1)[1].split(" W")[0]) for line in energy]
    assert watts[0] == pytest.approx(250, rel=0.1)  # counter over NVML's clock, span over the samples' times
    assert watts[1] == 120.0  # power × time at a constant draw
    assert lines[-1].endswith("from power readings × time: this GPU has no energy counter)")
