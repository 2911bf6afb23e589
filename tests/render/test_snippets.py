"""What the user copies or inserts is written once (render.snippets): the YAML parses back to the numbers, and
the gradient-accumulation loop keeps the user's mixed precision wherever it is offered."""

from __future__ import annotations

import types
import warnings
from typing import Any, Dict

import pytest
import yaml

from gpumem_kernel.render.snippets import LoopNames, accumulation_loop, comment_line, config_yaml

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from gpumem_kernel.oom.checklist import build_checklist  # noqa: E402
from gpumem_kernel.oom.diagnose import diagnose  # noqa: E402
from gpumem_kernel.oom.parse import parse_oom_message  # noqa: E402

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
    "7.79 GiB of which 12.00 MiB is free. Of the allocated memory 7.20 GiB is allocated by PyTorch, and "
    "100.00 MiB is reserved by PyTorch but unallocated."
)


def test_yaml_is_written_by_the_library_and_names_stay_in_one_line_comments():
    hostile = "Net\ndata:\n  batch_size: 999\u2028training: {}\x85# end"
    text = config_yaml([f"gpumem analysis of {hostile}"], {"data": {"batch_size": 64}, "training": {"use_amp": True}})
    assert yaml.safe_load(text) == {"data": {"batch_size": 64}, "training": {"use_amp": True}}
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert len(comments) == 1 and "batch_size: 999" in comments[0]  # kept, but inside the comment
    assert len(comment_line("x" * 500)) == 120


def _train(code: str) -> Dict[str, Any]:
    model = torch.nn.Linear(4, 2)
    ns: Dict[str, Any] = {
        "model": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "criterion": torch.nn.CrossEntropyLoss(),
        "train_loader": DataLoader(TensorDataset(torch.randn(12, 4), torch.randint(0, 2, (12,))), batch_size=3),
        "device": torch.device("cpu"),
    }
    steps = []
    original = ns["optimizer"].step
    ns["optimizer"].step = lambda *a, **k: (steps.append(1), original(*a, **k))[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GradScaler("cpu") on an old torch, autocast on CPU
        exec(compile(code, "<accumulation>", "exec"), ns)
    ns["optimizer_steps"] = len(steps)
    return ns


@pytest.mark.parametrize("amp", [None, "bf16", "fp16"])
def test_the_loop_steps_every_n_batches_and_keeps_the_mixed_precision(amp):
    code = accumulation_loop(2, amp, comments=["two micro-batches"])
    assert code.startswith("# two micro-batches\nimport torch\naccumulation_steps = 2\n")
    dtype = {"fp16": "dtype=torch.float16", "bf16": "dtype=torch.bfloat16"}.get(amp)
    assert ("torch.autocast(" in code) == (amp is not None) and (dtype is None or dtype in code)
    assert ("scaler.scale(loss).backward()" in code and "scaler.step(optimizer)" in code) == (amp == "fp16")
    if amp == "fp16" and not hasattr(getattr(torch, "amp", None), "GradScaler"):
        pytest.skip("torch.amp.GradScaler needs torch >= 2.3")
    ns = _train(code)
    assert ns["optimizer_steps"] == 2  # 4 batches of 3, one step every 2


def test_the_user_names_reach_the_loop():
    names = LoopNames(model="net", optimizer="opt", loader="dl", criterion="loss_fn", device='"cuda"')
    code = accumulation_loop(3, None, names)
    compile(code, "<accumulation>", "exec")
    assert "enumerate(dl)" in code and "loss_fn(net(inputs), targets)" in code and "opt.step()" in code
    assert 'inputs.to("cuda", non_blocking=True)' in code


def test_every_accumulation_snippet_keeps_amp():
    """The OOM checklist's loop once had no AMP: a user training with a GradScaler who followed it lost
    autocast, and the activations (what ran out of memory) doubled. Both places that offer the loop must keep it."""
    from gpumem_kernel.analysis.report.render import accumulation_code

    payload = {
        "settings": {"amp": "fp16", "checkpointing": False, "batch_size": 64, "grad_accum": 1},
        "recommendations": {
            "recommended": 32,
            "accumulation": {"target_effective_batch": 128, "explicit_target": True, "recommended": 4},
        },
    }
    analysis_code = accumulation_code(payload)
    assert analysis_code is not None and "scaler.scale(loss).backward()" in analysis_code

    model = torch.nn.Linear(4, 2)
    shell = types.SimpleNamespace(
        user_ns={
            "model": model,
            "opt": torch.optim.SGD(model.parameters(), lr=0.1),
            "scaler": torch.amp.GradScaler("cpu") if hasattr(torch, "amp") else object(),
            "batch_size": 32,
        },
        user_ns_hidden={},
    )
    info = parse_oom_message(OOM)
    diagnosis = diagnose(info, None, shell, env={})
    assert diagnosis.amp == "likely"  # the GradScaler says the user trains in mixed precision
    step = next(s for s in build_checklist(info, diagnosis) if s.id == "grad-accumulation")
    assert "torch.autocast(" in step.code and "scaler.scale(loss).backward()" in step.code
    compile(step.code, "<grad-accumulation>", "exec")
