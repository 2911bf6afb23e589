"""`%gpumem watch` in a real ipykernel (6 and 7): the widget's comm carries the panel's sample messages from the
sampler thread *while a cell runs*, an out-of-memory error reaches it after its cell, the front end's "Clear GPU
memory" is answered between cells, and `%gpumem watch stop` stops it. No front end here: the test reads the
widget's comm messages as a widget manager would receive them."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from gpumem_kernel.wire.protocol import validate
from kernel_harness import KernelHarness, Received

pytestmark = pytest.mark.kernel

BUSY_SECONDS = 3
OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.10 GiB "
    "is free. Including non-PyTorch memory, this process has 14.58 GiB memory in use. Of the allocated memory "
    "13.90 GiB is allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but unallocated."
)


def custom(messages: List[Received], comm_id: str) -> List[Dict[str, Any]]:
    """What the widget's front end would get as custom messages (anywidget's `msg:custom`)."""
    out = []
    for r in messages:
        data = r.comm_data(comm_id)
        if data is not None and data.get("method") == "custom":
            out.append(data["content"])
    return out


def test_the_watch_is_live_during_a_cell_and_answers_between_cells():
    with KernelHarness() as kernel:
        kernel.execute("%load_ext gpumem_kernel")
        shown = kernel.execute("%gpumem watch")
        assert shown["status"] == "ok"
        display = kernel.wait_for(
            lambda r: r.msg_type == "display_data" and r.parent_id == shown["msg_id"], timeout=10
        ).content["data"]
        comm_id = display["application/vnd.jupyter.widget-view+json"]["model_id"]
        assert "live in a notebook front end" in display["text/html"]  # a front end without widgets: the table

        start = len(kernel.messages())
        busy = kernel.execute(f"import time; time.sleep({BUSY_SECONDS})")
        during = [
            r
            for r in kernel.messages()[start:]
            if r.parent_id == busy["msg_id"] and r.msg_type == "comm_msg" and r.content["comm_id"] == comm_id
        ]
        samples = [m for m in custom(during, comm_id) if m["type"] == "sample"]
        assert len({s["seq"] for s in samples}) >= BUSY_SECONDS - 1  # about one a second, sent while it slept
        for sample in samples:
            validate(sample)

        start = len(kernel.messages())
        kernel.execute(f"import torch\nraise torch.OutOfMemoryError({OOM!r})")
        event = kernel.wait_for(
            lambda r: any(m["type"] == "watch_event" and m["oom"] for m in custom([r], comm_id)), start=start
        )
        oom_event = next(m for m in custom([event], comm_id) if m["type"] == "watch_event")
        validate(oom_event)
        assert oom_event["oom"]["info"]["tried_to_allocate"] == 2 * 1024**3

        start = len(kernel.messages())
        kernel.send_comm(comm_id, {"method": "custom", "content": {"request": "clear"}})
        cleared = kernel.wait_for(
            lambda r: any(m["type"] == "watch_event" and m["clear"] for m in custom([r], comm_id)), start=start
        )
        validate(next(m for m in custom([cleared], comm_id) if m["type"] == "watch_event"))

        stopped = kernel.execute("%gpumem watch stop")
        said = kernel.wait_for(lambda r: r.msg_type == "stream" and r.parent_id == stopped["msg_id"], timeout=10)
        assert said.content["text"].strip() == "stopped 1 live watch"
        assert custom(kernel.messages(), comm_id)[-1]["stopped"].startswith("stopped")
        assert kernel.evaluate("len(__import__('gpumem_kernel.extension').extension.current().watches.live)") == 0
