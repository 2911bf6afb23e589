"""A test-only Jupyter server extension: the GPUs of tests/fake_nvml.py stand in for the driver in a real server.

Enabled by the test's server config next to `gpumem_kernel.server` (and loaded after it: extensions load in
name order). The fake's GPUs and their processes are read from the JSON file named by GPUMEM_TEST_FAKE_GPUS
before each process list, so a test can list a kernel's PID once it knows it:

    {"gpus": [{"name": "...", "uuid": "GPU-...", "total": 17179869184, "used": 4294967296,
               "processes": [[12345, 3221225472]]}]}
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from fake_nvml import FakeGpu, FakeNvml, install_in_running_server


class FileFakeNvml(FakeNvml):
    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(self._read())

    def _read(self) -> List[FakeGpu]:
        with open(self.path, encoding="utf-8") as f:
            spec = json.load(f)
        return [
            FakeGpu(g["name"], g["uuid"], g["total"], g["used"], processes=[tuple(p) for p in g["processes"]])
            for g in spec["gpus"]
        ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> Any:
        fresh = {g.uuid: g for g in self._read()}.get(handle.uuid)
        if fresh is not None:
            handle.processes, handle.used = fresh.processes, fresh.used
        return super().nvmlDeviceGetComputeRunningProcesses(handle)


def _jupyter_server_extension_points() -> List[Dict[str, str]]:
    return [{"module": "server_fake_nvml"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    install_in_running_server(FileFakeNvml(os.environ["GPUMEM_TEST_FAKE_GPUS"]))
    serverapp.log.info("server_fake_nvml: the fake NVIDIA driver of the tests is installed")
