"""In a real ipykernel, as the browser drives it: `%gpumem analyze ... --timeline` shows the timeline output, and the
comm action `timeline_export` returns its history as PyTorch's snapshot pickle or a CSV (also on a subshell, as
JupyterLab >= 4.4 sends comm messages); an id this kernel run does not hold is one `error` line."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import pickle
from pathlib import Path
from typing import Any, Dict

import jsonschema
import pytest

import timeline_model
from gpumem_kernel.timeline.payload import TIMELINE_MIME
from gpumem_kernel.wire.protocol import validate
from kernel_harness import KernelHarness

pytestmark = pytest.mark.kernel

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "gpumem_kernel" / "wire" / "schemas" / "timeline.schema.json").read_text()
)
SETUP = f"""
import sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(timeline_model.__file__))!r})
import torch
torch.set_num_threads(1)
from timeline_model import Net, loss
net = Net()
"""


@pytest.fixture(scope="module")
def kernel():
    with KernelHarness() as harness:
        harness.bootstrap()
        assert harness.execute(SETUP)["status"] == "ok"
        yield harness


@pytest.fixture(scope="module")
def comm(kernel) -> Dict[str, Any]:
    comm_id = kernel.open_comm({"type": "open", "protocol": 1, "client": "pytest"})
    hello = kernel.wait_comm(comm_id, "hello")
    return {"id": comm_id, "hello": hello, "count": 0}


@pytest.fixture(scope="module")
def shown(kernel) -> Dict[str, Any]:
    start = len(kernel.messages())
    reply = kernel.execute("%gpumem analyze net -b 16 --input 256 --loss loss --timeline", timeout=240)
    assert reply["status"] == "ok", reply
    outputs = [r.content["data"] for r in kernel.messages()[start:] if r.msg_type == "display_data"]
    return next(data for data in outputs if TIMELINE_MIME in data)


def request(kernel, comm, action: str, args: Dict[str, Any], subshell: Any = None) -> Dict[str, Any]:
    comm["count"] += 1
    request_id = f"r-{action}-{comm['count']}"
    start = len(kernel.messages())
    kernel.send_comm(comm["id"], {"type": "request", "id": request_id, "action": action, "args": args}, subshell)
    message = kernel.wait_for(lambda r: (r.comm_data(comm["id"]) or {}).get("id") == request_id, 30, start)
    data = message.comm_data(comm["id"])
    validate(data)
    return data


def test_the_kernel_says_it_can_export_timelines(comm):
    assert "timeline" in comm["hello"]["capabilities"]


def test_analyze_shows_the_timeline_output(shown):
    jsonschema.Draft202012Validator(SCHEMA).validate(shown[TIMELINE_MIME])
    assert shown[TIMELINE_MIME]["source"] == "predicted"
    assert shown["text/plain"].startswith("Memory timeline (predicted): Net, batch 16")


def test_export_returns_the_snapshot_and_the_csv(kernel, comm, shown):
    payload = shown[TIMELINE_MIME]
    reply = request(kernel, comm, "timeline_export", {"id": payload["id"], "format": "snapshot"})
    assert reply["type"] == "reply", reply
    result = reply["result"]
    data = base64.b64decode(result["data"])
    assert result["bytes"] == len(data) and result["media_type"] == "application/octet-stream"
    assert result["filename"] == f"gpumem-{payload['id']}.pickle" and result["id"] == payload["id"]
    snapshot = pickle.loads(data)
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert len(allocs) == payload["events_total"] - sum(
        1 for e in snapshot["device_traces"][0] if e["action"] == "free_completed"
    )

    subshell = kernel.create_subshell()
    reply = request(kernel, comm, "timeline_export", {"id": payload["id"], "format": "csv"}, subshell)
    result = reply["result"]
    assert result["media_type"] == "text/csv" and result["filename"].endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(base64.b64decode(result["data"]).decode("utf-8"))))
    assert len(rows) == len(allocs)


def test_an_unknown_id_is_one_error_line(kernel, comm):
    reply = request(kernel, comm, "timeline_export", {"id": "tl-00000000deadbeef", "format": "csv"})
    assert reply["type"] == "error" and reply["code"] == "bad-request"
    assert reply["message"] == "this kernel no longer holds timeline tl-00000000deadbeef; re-run the cell"


@pytest.mark.parametrize(
    "args, message",
    [
        ({"id": "tl-00000000", "format": "json"}, "'format' must be snapshot or csv"),
        ({"id": "nope", "format": "csv"}, "needs an 'id' like tl-"),
        ({"id": "tl-00000000", "format": "csv", "extra": 1}, "timeline_export does not take extra"),
    ],
)
def test_bad_args_are_one_error_line(kernel, comm, args, message):
    reply = request(kernel, comm, "timeline_export", args)
    assert reply["type"] == "error" and reply["code"] == "bad-request" and message in reply["message"]
    assert "\n" not in reply["message"]


def test_a_cell_of_the_notebook_is_named_by_its_execution_count(kernel):
    defined = kernel.execute(
        "class CellNet(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(64, 128)\n"
        "    def forward(self, x):\n"
        "        return torch.tanh(self.fc(x))\n"
        "cellnet = CellNet()\n"
    )
    start = len(kernel.messages())
    assert (
        kernel.execute("%gpumem analyze cellnet -b 8 --input 64 --loss loss --timeline", timeout=240)["status"] == "ok"
    )
    data = next(
        r.content["data"]
        for r in kernel.messages()[start:]
        if r.msg_type == "display_data" and TIMELINE_MIME in r.content["data"]
    )
    payload = data[TIMELINE_MIME]
    band = next(b for b in payload["bands"] if b["category"] == "activation")
    stack = payload["stacks"][band["stack"]]
    frame = stack["frames"][stack["source"]]
    assert frame["cell"] == defined["execution_count"] and frame["line"] == 6 and frame["name"] == "forward"
    assert "ipykernel_" in frame["file"]  # ipykernel's cell file, mapped to its execution count
