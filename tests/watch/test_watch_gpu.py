"""On a real GPU: `%gpumem watch` never initialises CUDA itself (torch imported, no tensor on the GPU: still none
after the watch has sampled), and a 1 GiB tensor the user then allocates shows in the watch's samples."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from gpumem_kernel.wire.protocol import validate
from kernel_harness import KernelHarness

pytestmark = [pytest.mark.gpu, pytest.mark.kernel]

GiB = 2**30


def widget_samples(kernel: KernelHarness, comm_id: str, start: int = 0) -> List[Dict[str, Any]]:
    out = []
    for r in kernel.messages()[start:]:
        data = r.comm_data(comm_id)
        if data is not None and data.get("method") == "custom" and data["content"].get("type") == "sample":
            out.append(data["content"])
    return out


def test_the_watch_creates_no_cuda_context_and_shows_the_users_tensor():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    with KernelHarness() as kernel:
        kernel.execute("%load_ext gpumem_kernel\nimport torch")
        shown = kernel.execute("%gpumem watch")
        display = kernel.wait_for(lambda r: r.msg_type == "display_data" and r.parent_id == shown["msg_id"])
        comm_id = display.content["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
        kernel.wait_for(lambda r: len(widget_samples(kernel, comm_id)) >= 2, timeout=15)
        assert kernel.evaluate("torch.cuda.is_initialized()") is False

        start = len(kernel.messages())
        kernel.execute("x = torch.empty(2**28, dtype=torch.float32, device='cuda')")
        kernel.wait_for(
            lambda r: any(
                (d.get("allocator") or {}).get("allocated", 0) >= GiB
                for s in widget_samples(kernel, comm_id, start)
                for d in s["gpu"]["devices"]
            ),
            timeout=15,
        )
        for sample in widget_samples(kernel, comm_id, start):
            validate(sample)
