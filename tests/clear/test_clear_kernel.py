"""Clearing and the OOM checklist in a real ipykernel (jupyter_client), through plain Python calls
(`%gpumem clear` is wired to the same functions)."""

from __future__ import annotations

import json

import jsonschema
import pytest

from gpumem_kernel.clear.reclaim import CLEAR_MIME
from gpumem_kernel.wire.protocol import load_payload_schema
from gpumem_kernel.oom.bundle import OOM_MIME
from kernel_harness import KernelHarness, torch_in_kernel_python

OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.75 GiB of which "
    "3.06 MiB is free. Of the allocated memory 14.56 GiB is allocated by PyTorch, and 51.92 MiB is reserved "
    "by PyTorch but unallocated."
)
TENSOR_BYTES = 4 * 25 * 10**6  # torch.ones(25 * 10**6): 100 MB, large enough to show in the kernel's RSS


pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not torch_in_kernel_python(), reason="torch is not installed for the kernel's Python"),
]


@pytest.fixture(scope="module")
def kernel():
    with KernelHarness() as harness:
        harness.execute(
            "import gc, weakref, torch\nimport gpumem_kernel.clear.reclaim as c\nimport gpumem_kernel.oom.handler as o"
        )
        yield harness


def _clear(kernel: KernelHarness, args: str = "") -> dict:
    content = kernel.execute(f"r = c.clear_gpu_memory({args})")
    assert content["status"] == "ok", content
    payload = kernel.evaluate("__import__('json').dumps(r.to_payload())")
    return json.loads(payload)


def test_a_tensor_held_only_by_the_traceback_is_freed(kernel) -> None:
    kernel.execute(
        "def f():\n    t = torch.ones(25 * 10**6)\n    global w\n    w = weakref.ref(t)\n    raise ValueError('boom')"
    )
    assert kernel.execute("f()")["status"] == "error"
    kernel.execute("gc.collect()")
    assert kernel.evaluate("w() is not None") is True
    payload = _clear(kernel)
    assert kernel.evaluate("w() is None") is True
    assert payload["traceback_freed"]["bytes"] == TENSOR_BYTES
    assert payload["host_rss_before"] - payload["host_rss_after"] >= TENSOR_BYTES * 0.9  # the kernel's RSS dropped
    jsonschema.Draft202012Validator(load_payload_schema("clear")).validate(payload)


def test_a_tensor_held_only_by_the_out_cache_is_freed_and_variables_stay(kernel) -> None:
    kernel.execute("keep = torch.ones(1000)")
    reply = kernel.execute("torch.ones(25 * 10**6)")
    number = reply["execution_count"]
    kernel.execute(f"w2 = weakref.ref(Out[{number}])")
    assert kernel.evaluate("w2() is not None") is True
    payload = _clear(kernel)
    assert kernel.evaluate("w2() is None") is True
    assert kernel.evaluate(f"{number} in Out") is False
    assert kernel.evaluate("keep.shape[0]") == 1000
    assert [entry["bytes"] for entry in payload["output_cache"]] == [TENSOR_BYTES]
    assert any(h["name"] == "keep" for h in payload["holders"])


def test_named_variables_only(kernel) -> None:
    kernel.execute("a = torch.ones(10)\nb = torch.ones(10)")
    reply = kernel.execute("c.clear_gpu_memory(variables=['nope'])")
    assert reply["status"] == "error" and reply["ename"] == "ValueError" and "'nope'" in reply["evalue"]
    _clear(kernel, "variables=['a']")
    assert kernel.evaluate("('a' in globals(), 'b' in globals())") == (False, True)


def test_an_oom_in_a_cell_shows_the_traceback_and_the_checklist(kernel) -> None:
    assert kernel.evaluate("o.install_oom_handler(get_ipython())") == "OOM checklist installed"
    start = len(kernel.messages())
    reply = kernel.execute(
        f"def step():\n    big = torch.ones(1000)\n    raise torch.OutOfMemoryError({OOM_TEXT!r})\nstep()"
    )
    assert reply["status"] == "error" and reply["ename"] == "OutOfMemoryError"
    ours = [r for r in kernel.messages()[start:] if r.parent_id == reply["msg_id"]]
    kinds = [r.msg_type for r in ours if r.msg_type in ("error", "display_data")]
    assert kinds == ["error", "display_data"]  # the traceback first, then the checklist
    error = next(r for r in ours if r.msg_type == "error")
    assert error.content["ename"] == "OutOfMemoryError" and error.content["traceback"]
    data = next(r for r in ours if r.msg_type == "display_data").content["data"]
    assert set(data) == {OOM_MIME, "text/html", "text/plain"}
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(data[OOM_MIME])
    # 51.92 MiB cached + 3.06 MiB free would have covered the 20 MiB request: fragmentation, then clearing
    assert [s["action"] for s in data[OOM_MIME]["steps"][:2]] == ["insert-env-cell-and-restart", "clear"]
    # a non-OOM error still gets exactly the normal traceback
    start = len(kernel.messages())
    reply = kernel.execute("raise RuntimeError('shape mismatch')")
    assert reply["status"] == "error" and reply["ename"] == "RuntimeError"
    assert not [r for r in kernel.messages()[start:] if r.parent_id == reply["msg_id"] and r.msg_type == "display_data"]
    assert kernel.evaluate("o.uninstall_oom_handler(get_ipython())") == "OOM checklist removed"


def test_clear_bundle_displays(kernel) -> None:
    start = len(kernel.messages())
    reply = kernel.execute(
        "from IPython.display import display\ndisplay(c.clear_bundle(c.clear_gpu_memory(dry_run=True)), raw=True)"
    )
    shown = [r for r in kernel.messages()[start:] if r.parent_id == reply["msg_id"] and r.msg_type == "display_data"]
    assert len(shown) == 1 and CLEAR_MIME in shown[0].content["data"]
    assert kernel.evaluate("torch.cuda.is_initialized()") is False
