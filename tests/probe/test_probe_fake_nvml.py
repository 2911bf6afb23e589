"""The probe against a fake NVIDIA driver: devices, processes, kernel attribution, CUDA_VISIBLE_DEVICES, errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid as uuidlib
from typing import Iterator, List

import psutil
import pytest

from fake_nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    FakeGpu,
    FakeMig,
    GiB,
)
from gpumem_kernel.probe.devices import MigInstance, visible_devices
from gpumem_kernel.probe.nvml import Nvml
from gpumem_kernel.wire.protocol import validate
from gpumem_kernel.probe.sampler import Sampler

UUID0 = "GPU-8f3a1111-2222-3333-4444-555555555555"
UUID1 = "GPU-8f3b6666-7777-8888-9999-000000000000"
MIG_UUID = "MIG-1c2d3e4f-aaaa-bbbb-cccc-dddddddddddd"


def two_gpus(**extra) -> List[FakeGpu]:
    return [
        FakeGpu("NVIDIA GeForce RTX 4080 SUPER", UUID0, **extra),
        FakeGpu("NVIDIA GeForce RTX 4080 SUPER", UUID1),
    ]


@pytest.fixture
def other_kernels(tmp_path) -> Iterator[List[tuple]]:
    """Two real processes started like Jupyter kernels: `-f …/kernel-<id>.json` in their command line."""
    started = []
    for _ in range(2):
        kernel_id = str(uuidlib.uuid4())
        connection_file = tmp_path / f"kernel-{kernel_id}.json"
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-f", str(connection_file)])
        started.append((process, kernel_id))
    for process, _ in started:  # wait until psutil sees the final command line (after exec)
        for _ in range(200):
            if str(tmp_path) in " ".join(psutil.Process(process.pid).cmdline()):
                break
            time.sleep(0.01)
    yield [(p.pid, k) for p, k in started]
    for process, _ in started:
        process.kill()
        process.wait()


def cuda_indices(sample: dict) -> dict:
    return {d["nvml_index"]: d["cuda_index"] for d in sample["gpu"]["devices"] if not d["mig"]}


def test_two_gpus_are_listed_in_nvml_order_with_their_facts(make_prober):
    sample = make_prober(two_gpus())().to_dict()

    gpu = sample["gpu"]
    assert gpu["available"] is True and gpu["reason"] is None
    assert gpu["driver_version"] == "550.54.15" and gpu["cuda_driver_version"] == "12.4"
    first = gpu["devices"][0]
    assert (first["nvml_index"], first["cuda_index"], first["uuid"]) == (0, 0, UUID0)
    assert (first["total"], first["used"], first["free"]) == (16 * GiB, 2 * GiB, 14 * GiB)
    assert (first["util_gpu"], first["util_mem"], first["compute_capability"]) == (37, 12, "8.9")
    assert first["allocator"] is None  # torch has not initialised CUDA
    validate(sample)


def test_processes_are_attributed_to_this_kernel_other_kernels_and_outsiders(make_prober, other_kernels):
    (pid_a, id_a), (pid_b, id_b) = other_kernels
    outsider = psutil.Process().ppid()
    gpus = two_gpus(processes=[(os.getpid(), 1 * GiB), (pid_a, 3 * GiB), (outsider, 100)])
    gpus[1].processes = [(os.getpid(), GiB // 2), (pid_b, 2 * GiB)]

    sample = make_prober(gpus)().to_dict()

    by_pid = {p["pid"]: p for d in sample["gpu"]["devices"] for p in d["processes"]}
    assert by_pid[os.getpid()]["this_kernel"] is True
    assert (by_pid[pid_a]["kernel_id"], by_pid[pid_a]["this_kernel"]) == (id_a, False)
    assert by_pid[pid_b]["kernel_id"] == id_b
    assert by_pid[pid_a]["name"].startswith("python")
    assert by_pid[outsider]["kernel_id"] is None
    devices = sample["gpu"]["devices"]
    assert (devices[0]["this_kernel"], devices[1]["this_kernel"]) == (GiB, GiB // 2)
    assert sample["kernel"]["gpu_used"] == GiB + GiB // 2
    validate(sample)


def test_a_pid_that_no_longer_exists_keeps_its_memory_but_has_no_name(make_prober):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    sample = make_prober(two_gpus(processes=[(gone.pid, GiB)]))().to_dict()

    process = sample["gpu"]["devices"][0]["processes"][0]
    assert (process["pid"], process["used"], process["name"]) == (gone.pid, GiB, None)
    assert sample["kernel"]["gpu_used"] is None  # this kernel is not on any GPU


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, {0: 0, 1: 1}),
        ("1", {0: None, 1: 0}),
        ("1,0", {0: 1, 1: 0}),
        (UUID1, {0: None, 1: 0}),
        ("GPU-8f3b", {0: None, 1: 0}),  # unique prefix
        ("GPU-8f3", {0: None, 1: None}),  # ambiguous prefix: invalid, nothing before it
        ("1,bogus,0", {0: None, 1: 0}),  # CUDA stops at the first invalid entry
        ("0,7,1", {0: 0, 1: None}),  # out of range is invalid too
        ("", {0: None, 1: None}),
        (" 1 , 0 ", {0: 1, 1: 0}),
    ],
)
def test_cuda_visible_devices_maps_nvml_devices_to_torch_numbering(make_prober, value, expected):
    env = {} if value is None else {"CUDA_VISIBLE_DEVICES": value}
    sample = make_prober(two_gpus(), env=env)().to_dict()

    assert cuda_indices(sample) == expected
    assert sample["gpu"]["visible_devices"] == value


def test_device_order_is_reported(make_prober):
    assert make_prober(two_gpus())().to_dict()["gpu"]["device_order"] == "FASTEST_FIRST"
    sample = make_prober(two_gpus(), env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})().to_dict()
    assert sample["gpu"]["device_order"] == "PCI_BUS_ID"


def mig_gpus() -> List[FakeGpu]:
    gpus = two_gpus()
    gpus[1].migs = [None, FakeMig(MIG_UUID, gpu_instance=3, compute_instance=0, processes=[(os.getpid(), GiB)])]
    return gpus


@pytest.mark.parametrize("value", [MIG_UUID, MIG_UUID[:12], f"MIG-{UUID1}/3/0"])
def test_a_mig_id_in_cuda_visible_devices_reports_that_mig_device(make_prober, value):
    sample = make_prober(mig_gpus(), env={"CUDA_VISIBLE_DEVICES": value})().to_dict()

    migs = [d for d in sample["gpu"]["devices"] if d["mig"]]
    assert len(migs) == 1
    mig = migs[0]
    assert (mig["nvml_index"], mig["cuda_index"], mig["uuid"]) == (1, 0, MIG_UUID)
    assert (mig["total"], mig["used"], mig["sm_count"]) == (10 * GiB, GiB, 14)
    assert mig["this_kernel"] == GiB and sample["kernel"]["gpu_used"] == GiB
    assert cuda_indices(sample) == {0: None, 1: None}
    validate(sample)


def test_visible_devices_parser_without_nvml():
    migs = [MigInstance(1, 1, MIG_UUID, 3, 0)]
    assert [v.nvml_index for v in visible_devices("0,1", [UUID0, UUID1])] == [0, 1]
    assert [v.nvml_index for v in visible_devices("1,1", [UUID0, UUID1])] == [1]  # repeat ends the list
    assert visible_devices(f"{MIG_UUID},0", [UUID0, UUID1], lambda: migs)[0].mig == migs[0]
    assert visible_devices("MIG-GPU-nope/3/0", [UUID0, UUID1], lambda: migs) == []


def test_nvml_init_failure_gives_a_reason_and_the_host_part_still_works(make_prober):
    sample = make_prober(two_gpus(), init_error=NVML_ERROR_LIBRARY_NOT_FOUND)().to_dict()

    assert sample["gpu"]["available"] is False
    assert sample["gpu"]["reason"] == "NVIDIA driver library (libnvidia-ml.so.1) not found"
    assert sample["host"]["total"] == psutil.virtual_memory().total
    validate(sample)


def test_driver_not_loaded_and_missing_binding_have_their_own_reasons(make_prober):
    sample = make_prober(two_gpus(), init_error=NVML_ERROR_DRIVER_NOT_LOADED)().to_dict()
    assert sample["gpu"]["reason"] == "NVIDIA driver not loaded"

    def missing() -> None:
        raise ImportError("No module named 'pynvml'")

    assert Nvml(loader=missing).start().startswith("nvidia-ml-py is not installed")


def test_nvml_is_initialised_once(make_prober):
    prober = make_prober(two_gpus())
    for _ in range(3):
        prober()
    assert prober.nvml.module.init_calls == 1
    assert prober.nvml.module.calls["nvmlDeviceGetCount"] == 1


def test_unsupported_utilisation_is_null_and_reported_once_by_the_sampler(make_prober):
    prober = make_prober(two_gpus(fail={"nvmlDeviceGetUtilizationRates": NVML_ERROR_NOT_SUPPORTED}))
    sampler = Sampler(prober)

    first, second = sampler.sample_once(), sampler.sample_once()

    assert first["gpu"]["devices"][0]["util_gpu"] is None
    assert first["gpu"]["devices"][1]["util_gpu"] == 37
    assert first["errors"] == ["nvmlDeviceGetUtilizationRates(0): Not Supported"]
    assert second["errors"] == []
    assert second["gpu"]["devices"][0]["util_gpu"] is None
    validate(first)


def test_a_device_failing_mid_sample_does_not_lose_the_others(make_prober):
    gpus = two_gpus()
    gpus[0].fail = {
        "nvmlDeviceGetMemoryInfo": NVML_ERROR_GPU_IS_LOST,
        "nvmlDeviceGetComputeRunningProcesses": NVML_ERROR_GPU_IS_LOST,
    }
    gpus[1].processes = [(os.getpid(), GiB)]

    sample = make_prober(gpus)().to_dict()

    lost, fine = sample["gpu"]["devices"]
    assert (lost["total"], lost["used"], lost["free"]) == (None, None, None)
    assert lost["name"] == "NVIDIA GeForce RTX 4080 SUPER"
    assert (fine["total"], fine["this_kernel"]) == (16 * GiB, GiB)
    assert "nvmlDeviceGetMemoryInfo(0): GPU is lost" in sample["errors"]
    validate(sample)


def test_static_device_facts_are_queried_once_and_memory_every_time(make_prober):
    prober = make_prober(two_gpus(processes=[(os.getpid(), GiB)]))
    prober()
    before = dict(prober.nvml.module.calls)
    prober()
    after = prober.nvml.module.calls
    assert after.get("nvmlDeviceGetName") == before.get("nvmlDeviceGetName")  # static facts cached
    assert after["nvmlDeviceGetMemoryInfo"] == before["nvmlDeviceGetMemoryInfo"] + 2
