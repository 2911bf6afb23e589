"""On a real GPU: a tensor allocated in the kernel shows up in the panel's allocator figures within two samples."""

from __future__ import annotations

import datetime
import json
import platform
import time

import pytest

from gpumem_kernel.wire.protocol import validate
from kernel_harness import REPO_ROOT, KernelHarness

pytestmark = [pytest.mark.gpu, pytest.mark.kernel]

GiB = 2**30
RESULTS = REPO_ROOT / "benchmarks" / "results" / "gpu_live_allocated.json"


def cuda0(sample: dict) -> dict:
    return next(d for d in sample["gpu"]["devices"] if d["cuda_index"] == 0)


def test_a_1_gib_tensor_appears_in_the_allocator_within_two_samples():
    with KernelHarness() as kernel:
        kernel.bootstrap()
        comm = kernel.open_comm({"type": "open", "protocol": 1, "interval": 1.0})
        hello = kernel.wait_comm(comm, "hello")
        kernel.execute("import torch\nx = torch.empty(2**28, dtype=torch.float32, device='cuda')")
        finished = time.monotonic()
        start = len(kernel.messages())
        kernel.wait_comm(comm, "sample", start=start)
        kernel.wait_for(lambda r: len(kernel.comm_messages(comm, "sample", start=start)) >= 2, timeout=10)
        received = kernel.comm_messages(comm, "sample", start=start)[:2]
        samples = [r.comm_data(comm) for r in received]

    for sample in samples:
        validate(sample)
    allocators = [cuda0(s)["allocator"] for s in samples]
    reached = next((i for i, a in enumerate(allocators) if a and a["allocated"] >= GiB), None)
    device = cuda0(samples[-1])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "machine": {
                    "host": platform.node(),
                    "gpu": device["name"],
                    "driver": samples[-1]["gpu"]["driver_version"],
                    "cuda_driver": samples[-1]["gpu"]["cuda_driver_version"],
                },
                "versions": {
                    "gpumem_kernel": hello["version"],
                    "python": hello["python"],
                    "ipykernel": hello["ipykernel"],
                    "torch": samples[-1]["kernel"]["torch"]["version"],
                },
                "requested_bytes": GiB,
                "samples_after_cell": [
                    {
                        "seconds_after_cell": round(r.at - finished, 3),
                        "allocated": cuda0(s)["allocator"] and cuda0(s)["allocator"]["allocated"],
                        "reserved": cuda0(s)["allocator"] and cuda0(s)["allocator"]["reserved"],
                        "this_kernel_nvml": cuda0(s)["this_kernel"],
                        "device_used": cuda0(s)["used"],
                    }
                    for r, s in zip(received, samples)
                ],
                "reached_in_sample": None if reached is None else reached + 1,
            },
            indent=2,
        )
        + "\n"
    )
    assert reached is not None, f"allocator figures after the cell: {allocators}"
    assert samples[-1]["kernel"]["torch"]["cuda_initialized"] is True
