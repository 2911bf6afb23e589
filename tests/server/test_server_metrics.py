"""A real Jupyter server with the extension: /metrics (with and without the token), GPU processes mapped to this
server's kernels and notebooks, idle time, idle GPU holders, /gpumem/kernels; and the same server without NVML.

This machine has no NVIDIA driver: the test-only server extension server_fake_nvml.py installs the fake driver
of tests/fake_nvml.py in the server process and lists the processes a test writes to a JSON file.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server_harness import JupyterServer

GiB = 1024**3
UUID0 = "GPU-8f3a1111-2222-3333-4444-555555555555"
NOTEBOOK = "work/idle.ipynb"
EMPTY_NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}

pytestmark = pytest.mark.timeout(240)

Samples = Dict[str, List[Tuple[Dict[str, str], float]]]


def scrape(server: JupyterServer) -> Samples:
    status, body = server.get("/metrics")
    assert status == 200, body[:300]
    found: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def one(samples: Samples, metric: str, **labels: str) -> float:
    matches = [v for lab, v in samples.get(metric, []) if all(lab.get(k) == v2 for k, v2 in labels.items())]
    assert len(matches) == 1, (metric, labels, samples.get(metric))
    return matches[0]


def write_gpus(path: Path, processes: List[Tuple[int, int]]) -> None:
    gpu = {"name": "NVIDIA GeForce RTX 4080 SUPER", "uuid": UUID0, "total": 16 * GiB, "used": 6 * GiB}
    path.write_text(json.dumps({"gpus": [{**gpu, "processes": processes}]}))


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory) -> Iterator[Tuple[JupyterServer, Path]]:
    tmp = tmp_path_factory.mktemp("server")
    gpus = tmp / "gpus.json"
    write_gpus(gpus, [])
    server = JupyterServer(
        tmp,
        {"gpumem_kernel.server": True, "server_fake_nvml": True},
        # 0.05 min = 3 s: the idle-holder gauge can be seen to turn on within the test
        {"GpuMemServer": {"idle_minutes": 0.05}},
    )
    server.env["GPUMEM_TEST_FAKE_GPUS"] = str(gpus)
    (server.root / "work").mkdir()
    (server.root / NOTEBOOK).write_text(json.dumps(EMPTY_NOTEBOOK))
    with server:
        yield server, gpus


def test_metrics_need_the_token_and_name_each_kernel_and_notebook_holding_gpu_memory(fake_server):
    server, gpus = fake_server
    status, _ = server.get("/metrics", token=False)
    assert status in (401, 403)

    session = server.json(
        "POST", "/api/sessions", {"path": NOTEBOOK, "type": "notebook", "name": "idle", "kernel": {"name": "python3"}}
    )
    notebook_kernel = session["kernel"]["id"]
    other_kernel = server.json("POST", "/api/kernels", {"name": "python3"})["id"]  # a second kernel, no notebook
    notebook_pid = server.kernel_pid(notebook_kernel)
    server.kernel_pid(other_kernel)
    external = os.getpid()  # this test process: on the GPU, but no kernel of the server
    write_gpus(gpus, [(notebook_pid, 3 * GiB), (external, 1 * GiB)])
    server.wait_idle(notebook_kernel)
    server.wait_idle(other_kernel)
    time.sleep(1.1)  # past the 1 s the server reuses one read

    samples = scrape(server)
    assert one(samples, "gpumem_nvml_available") == 1
    bearer = {"Authorization": f"Bearer {server.token}"}  # as docs/monitoring/prometheus.yml sends it
    with urllib.request.urlopen(urllib.request.Request(server.url + "/metrics", headers=bearer), timeout=30) as r:
        assert r.status == 200 and b"gpumem_process_gpu_memory_bytes{" in r.read()
    gpu = {"gpu": "0", "uuid": UUID0, "name": "NVIDIA GeForce RTX 4080 SUPER"}
    assert one(samples, "gpumem_gpu_memory_total_bytes", **gpu) == 16 * GiB
    assert one(samples, "gpumem_gpu_memory_used_bytes", **gpu) == 6 * GiB
    assert one(samples, "gpumem_gpu_memory_used_percent", **gpu) == pytest.approx(37.5)
    assert one(samples, "gpumem_gpu_utilization_percent", **gpu) == 37

    held = one(
        samples,
        "gpumem_process_gpu_memory_bytes",
        pid=str(notebook_pid),
        kernel_id=notebook_kernel,
        notebook_path=NOTEBOOK,
        gpu="0",
    )
    assert held == 3 * GiB
    assert one(samples, "gpumem_process_gpu_memory_bytes", pid=str(external), kernel_id="", notebook_path="") == GiB
    assert one(samples, "gpumem_kernel_gpu_memory_bytes", kernel_id=notebook_kernel, notebook_path=NOTEBOOK) == 3 * GiB
    assert one(samples, "gpumem_kernel_gpu_memory_bytes", kernel_id=other_kernel, notebook_path="") == 0
    took = one(samples, "gpumem_collect_duration_seconds")
    assert took > 0
    print(f"one read of NVML, processes and kernels: {took * 1000:.2f} ms")

    # idle seconds grow for an idle kernel; the one holding GPU memory becomes an idle GPU holder after 3 s
    first = one(samples, "gpumem_kernel_idle_seconds", kernel_id=other_kernel)
    time.sleep(3.2)
    later = scrape(server)
    assert one(later, "gpumem_kernel_idle_seconds", kernel_id=other_kernel) >= first + 3
    assert one(later, "gpumem_kernel_idle_seconds", kernel_id=notebook_kernel) > 3
    assert one(later, "gpumem_idle_threshold_seconds") == 3
    assert one(later, "gpumem_idle_gpu_holders") == 1  # the other kernel is idle too, but holds no GPU memory

    # the panel's endpoint: same facts, same authentication as /api/kernels
    assert server.get("/gpumem/kernels", token=False)[0] in (401, 403)
    payload = server.json("GET", "/gpumem/kernels")
    kernels = {k["id"]: k for k in payload["kernels"]}
    assert kernels[notebook_kernel]["gpu_bytes"] == 3 * GiB and kernels[notebook_kernel]["path"] == NOTEBOOK
    assert kernels[notebook_kernel]["idle_seconds"] > 3 and kernels[notebook_kernel]["execution_state"] == "idle"
    assert kernels[other_kernel]["gpu_bytes"] == 0
    assert payload["nvml_available"] is True and payload["idle_minutes"] == 0.05

    # scrapes are cheap: a burst of 20 is served from at most a few reads
    started = time.perf_counter()
    for _ in range(20):
        assert server.get("/metrics")[0] == 200
    per_scrape = (time.perf_counter() - started) / 20
    print(f"one /metrics scrape over HTTP: {per_scrape * 1000:.1f} ms")
    assert per_scrape < 0.5


def test_without_nvml_the_metrics_still_answer_with_the_kernels(tmp_path):
    # No fake here: this machine's real NVML is absent (on a GPU machine the gauge is 1 and the test says so).
    with JupyterServer(tmp_path, {"gpumem_kernel.server": True}) as server:
        kernel = server.json("POST", "/api/kernels", {"name": "python3"})["id"]
        server.wait_idle(kernel)
        time.sleep(1.1)
        samples = scrape(server)
        if one(samples, "gpumem_nvml_available") == 1:
            pytest.skip("this machine has a working NVIDIA driver")
        assert "gpumem_gpu_memory_used_bytes" not in samples
        assert one(samples, "gpumem_kernel_idle_seconds", kernel_id=kernel) >= 0
        assert one(samples, "gpumem_kernel_gpu_memory_bytes", kernel_id=kernel) == 0
        assert one(samples, "gpumem_idle_gpu_holders") == 0
        payload = server.json("GET", "/gpumem/kernels")
        assert payload["nvml_available"] is False and payload["reason"]
        assert "server.py" not in server.log.read_text()  # no traceback in the server's log


def test_idle_counts_from_the_last_cell_not_from_the_panels_samples(fake_server):
    """jupyter_server's last_activity counts comm messages: with the GPU panel following a kernel it never ages.
    The extension's idle time counts from the last execution."""
    server, _ = fake_server
    kernel = server.json("POST", "/api/kernels", {"name": "python3"})["id"]
    server.wait_idle(kernel)
    server.open_gpumem_comm(kernel, interval=0.5)  # %load_ext is an execution: idle counts from here
    time.sleep(1.1)
    first = one(scrape(server), "gpumem_kernel_idle_seconds", kernel_id=kernel)
    time.sleep(3)
    idle = one(scrape(server), "gpumem_kernel_idle_seconds", kernel_id=kernel)
    model = server.json("GET", f"/api/kernels/{kernel}")
    since_activity = time.time() - datetime.fromisoformat(model["last_activity"].replace("Z", "+00:00")).timestamp()
    assert since_activity < 2, model  # the samples keep jupyter_server's kernel "active"
    assert idle >= first + 2.5  # but no cell ran

    server.execute(kernel, "x = 1")
    time.sleep(1.1)
    assert one(scrape(server), "gpumem_kernel_idle_seconds", kernel_id=kernel) < 2
