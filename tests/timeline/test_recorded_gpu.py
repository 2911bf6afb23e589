"""On a real GPU (skipped without one, see conftest.py): the recorded timeline of a small training step, and the
OOM capture of a provoked OOM, through the real private PyTorch APIs. The CPU tests of the same code read
snapshot fixtures (test_recorded.py, test_oom_capture.py); the GPU suite (benchmarks/gpu/timeline_gpu.py) adds
larger models, the comparison with the predicted timeline, and the recording's cost."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

MiB = 1 << 20


def _step(torch, model, optimizer, x) -> None:
    optimizer.zero_grad(set_to_none=True)
    model(x).square().mean().backward()
    optimizer.step()


def test_the_recorded_peak_is_the_allocators_within_the_recording() -> None:
    import torch

    from gpumem_kernel.timeline import recorded

    torch.manual_seed(0)
    layers = [torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(4096, 10)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 1024)
    torch.cuda.synchronize()
    parameters = torch.cuda.memory_allocated()
    with recorded.record_timeline() as rec:
        torch.cuda.reset_peak_memory_stats()
        _step(torch, model, optimizer, x.cuda())
        _step(torch, model, optimizer, x.cuda())
        torch.cuda.synchronize()
        truth = torch.cuda.max_memory_allocated()
    history, payload = rec.history, rec.payload()
    assert history is not None and payload is not None, rec.reason or rec.error
    peak = payload["peak"]["bytes"]
    # The allocator counts whole blocks; an unsplit large block can hold up to 1 MiB more than its request
    # (the GPU suite's slack: 10 % below, never above).
    assert 0.9 * truth <= peak <= truth, (peak, truth)
    assert payload["baseline"] >= parameters - MiB  # the parameters were allocated before the recording
    assert payload["events_dropped"] == 0 and payload["end"] == len(history.raw_snapshot["device_traces"][0])
    categories = {a.category for a in history.allocs}
    assert "optimizer_state" in categories  # AdamW's state, created in the first recorded step
    lines = [
        f for a in history.allocs for f in a.frames if f.file == __file__ and a.category in ("input", "activation")
    ]
    assert lines, "no allocation attributed to this file's lines"


def test_without_initialised_cuda_nothing_is_recorded_and_cuda_stays_off() -> None:
    import subprocess
    import sys

    code = (
        "import torch, gpumem_kernel\n"
        "with gpumem_kernel.record_timeline() as rec:\n"
        "    torch.ones(3)\n"
        "print(rec.history is None, torch.cuda.is_initialized())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "False"], done.stderr
    assert "nothing to record: CUDA is not in use" in done.stderr


def test_the_oom_capture_says_what_was_alive_at_a_provoked_oom() -> None:
    import torch

    from gpumem_kernel.timeline import capture

    cap = capture.Capture()  # a kernel's capture, as the loaded extension owns one

    torch.cuda.init()
    cap.set_enabled(True)
    cap.pre_run_cell()
    assert cap.recording, cap.problem
    ballast = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    alive = None
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        allocated = torch.cuda.memory_allocated()
        alive = cap.alive_at_oom(2 * total, 0, "provoked")
    finally:
        cap.post_run_cell()
        cap.set_enabled(False)
    assert alive is not None
    assert alive["allocated"] == allocated
    assert alive["failed"] is not None and alive["failed"]["size"] >= 2 * total
    mine = [h for h in alive["holders"] if h["size"] >= 256 * MiB]
    assert mine and mine[0]["source"]["user"] and mine[0]["source"]["file"] == __file__
    if hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
        assert not any("no OOM observer" in n for n in alive["notes"])  # taken before the exception unwound
    del ballast
