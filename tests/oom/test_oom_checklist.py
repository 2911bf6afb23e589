"""diagnose → build_checklist → oom_bundle: ordering, computed values, runnable snippets, guide steps, schema."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

import jsonschema
import pytest

from gpumem_kernel.wire.protocol import load_payload_schema
from gpumem_kernel.oom import diagnose as diagnose_module
from gpumem_kernel.oom.bundle import OOM_MIME, oom_bundle, checklist_bundle
from gpumem_kernel.oom.checklist import SEED_STEPS, build_checklist
from gpumem_kernel.oom.diagnose import diagnose
from gpumem_kernel.oom.diagnosis import TracebackPin
from gpumem_kernel.oom.order import CAUSE_STEPS, COST_ORDER, step_key
from gpumem_kernel.oom.parse import parse_oom_message
from gpumem_kernel.oom.step import ACTIONS
from gpumem_kernel.oom.steps_training import suggested_batch

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

MESSAGES = Path(__file__).parent / "messages"
CORPUS = json.loads((Path(__file__).parent / "corpus.json").read_text("utf-8"))["messages"]
MIB, GIB = 1024**2, 1024**3
ORDER = [
    "clear",
    "restart",
    "shutdown-*",
    "other-processes",
    "batch-size",
    "eval-batch-size",
    "grad-accumulation",
    "mixed-precision",
    "smaller-inputs",
    "host-memory",
    "fewer-workers",
    "grad-checkpointing",
    "expandable-segments",
    "smaller-model",
]
# The PyTorch 2.x message of ui-tests/tests/oom.spec.ts: 412 MiB cached is below a quarter of the 2 GiB
# request, and nothing else holds memory, so the figures name no cause.
NO_CAUSE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.70 GiB "
    "of which 1.10 GiB is free. Including non-PyTorch memory, this process has 14.58 GiB memory in use. Of the "
    "allocated memory 13.90 GiB is allocated by PyTorch, and 412.00 MiB is reserved by PyTorch but unallocated."
)
V2 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.75 GiB "
    "of which 3.06 MiB is free. Process 4242 has 2.00 GiB memory in use. Process 777 has 1.50 GiB memory in use. "
    "Including non-PyTorch memory, this process has 11.20 GiB memory in use. Of the allocated memory 10.56 GiB is "
    "allocated by PyTorch, and 51.92 MiB is reserved by PyTorch but unallocated."
)


def message(name: str) -> str:
    return "".join((MESSAGES / name).read_text("utf-8").splitlines(keepends=True)[1:])


def shell_with(**user_ns: Any) -> Any:
    """Just what diagnose reads from an IPython shell."""
    return types.SimpleNamespace(user_ns=dict(user_ns), user_ns_hidden={})


def training_namespace(workers: int = 2, batch: int = 32) -> Dict[str, Any]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return dict(
        model=model,
        opt=torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=torch.nn.CrossEntropyLoss(),
        train_dl=DataLoader(
            TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=batch, num_workers=workers
        ),
        device="cpu",
        IMG_SIZE=224,
    )


def sample(
    processes: Optional[List[Dict[str, Any]]] = None, children: int = 2, capability: str = "7.5"
) -> Dict[str, Any]:
    """A probe sample in the wire format (gpumem_kernel/wire/schemas/README.md)."""
    return {
        "type": "sample",
        "seq": 0,
        "time": 0.0,
        "gpu": {
            "available": True,
            "reason": None,
            "driver_version": "550.54.15",
            "cuda_driver_version": "12.4",
            "visible_devices": None,
            "device_order": "FASTEST_FIRST",
            "devices": [
                {
                    "nvml_index": 0,
                    "cuda_index": 0,
                    "name": "Tesla T4",
                    "uuid": "GPU-1",
                    "mig": False,
                    "total": int(14.75 * GIB),
                    "used": int(14.7 * GIB),
                    "free": 3 * MIB,
                    "util_gpu": 99,
                    "util_mem": 50,
                    "compute_capability": capability,
                    "sm_count": 40,
                    "this_kernel": int(11.2 * GIB),
                    "allocator": None,
                    "processes": processes
                    if processes is not None
                    else [
                        {
                            "pid": 1000,
                            "name": "python",
                            "used": int(11.2 * GIB),
                            "kernel_id": "mine",
                            "this_kernel": True,
                        },
                        {
                            "pid": 4242,
                            "name": "python",
                            "used": 2 * GIB,
                            "kernel_id": "8f0c1d2e-other",
                            "this_kernel": False,
                        },
                        {
                            "pid": 777,
                            "name": "<img src=x onerror=alert(1)>",
                            "used": int(1.5 * GIB),
                            "kernel_id": None,
                            "this_kernel": False,
                        },
                    ],
                }
            ],
        },
        "kernel": {
            "pid": 1000,
            "gpu_used": int(11.2 * GIB),
            "torch": {"imported": True, "version": "2.13.0", "cuda_initialized": True},
        },
        "host": {
            "rss": 3 * GIB,
            "total": 32 * GIB,
            "available": 20 * GIB,
            "children": {"count": children, "rss": GIB},
            "container_limit": None,
            "container_usage": None,
        },
        "errors": [],
    }


def checklist(
    text: str = V2,
    env: Optional[Dict[str, str]] = None,
    recommendation: Optional[int] = None,
    ns: Optional[Dict[str, Any]] = None,
    probe: Optional[Dict[str, Any]] = None,
):
    info = parse_oom_message(text)
    d = diagnose(
        info,
        probe if probe is not None else sample(),
        shell_with(**(ns if ns is not None else training_namespace())),
        env={} if env is None else env,
    )
    return info, d, build_checklist(info, d, recommendation, None, probe)


def ids(steps) -> List[str]:
    return [s.id for s in steps]


def validate(payload: Dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(json.loads(json.dumps(payload)))


def own_kernel_only(children: int = 2) -> Dict[str, Any]:
    """A probe that lists only this kernel on the GPU (NVML can list processes; there are no others)."""
    own = {"pid": 1000, "name": "python", "used": GIB, "kernel_id": "mine", "this_kernel": True}
    return sample(processes=[own], children=children)


def test_without_a_cause_steps_are_ordered_cheapest_to_most_drastic() -> None:
    """The cost order (COST_ORDER) when the figures name no cause; was the order of every checklist before."""
    # the fit advice's steps come only with a model that failed (tests/oom/test_oom_figures.py): computing what
    # each lever does before the batch, the 8-bit optimizer after mixed precision
    assert [k for k in COST_ORDER if k not in ("fit-advice", "8bit-optimizer")] == ORDER
    assert COST_ORDER.index("fit-advice") == ORDER.index("batch-size")
    assert COST_ORDER.index("8bit-optimizer") == COST_ORDER.index("mixed-precision") + 1
    info, d, steps = checklist(text=NO_CAUSE, probe=own_kernel_only())
    assert d.causes == []
    assert [step_key(i) for i in ids(steps)] == [k for k in ORDER if k not in ("shutdown-*", "other-processes")] + [
        "other-processes"  # folded: PyTorch's message lists no other process
    ]
    assert all(s.action in ACTIONS or s.action is None for s in steps)


def test_with_another_kernel_and_a_process_holding_memory_their_steps_come_first() -> None:
    """V2: the other kernel and PID 777 hold 3.50 GiB for a 20 MiB request; 51.92 MiB cached would do too."""
    _, d, steps = checklist()
    assert [(c.kind, c.decisive) for c in d.causes] == [("other-processes", True), ("fragmentation", True)]
    assert [step_key(i) for i in ids(steps)] == [
        "shutdown-*",
        "other-processes",
        "expandable-segments",
        "clear",
        "restart",
        *[k for k in ORDER if k not in ("clear", "restart", "shutdown-*", "other-processes", "expandable-segments")],
    ]
    assert d.notes[0] == (
        "Likely cause: other processes hold 3.50 GiB on this GPU; that memory plus the free memory would have "
        "covered the request, so the steps about them come first"
    )


# Each real message's diagnosis (its first cause) and the step it puts first; no probe, no namespace.
FIRST_STEPS = [
    ("v2_fragmentation.txt", "fragmentation", "expandable-segments"),  # 9.35 GiB cached: the largest share
    ("v2_this_process.txt", "fragmentation", "expandable-segments"),
    ("v21_no_process_lines.txt", "fragmentation", "expandable-segments"),
    ("v2_private_pools.txt", "fragmentation", "expandable-segments"),
    ("v2_hip_allowed_private_pools.txt", "fragmentation", "expandable-segments"),
    ("v21_one_process_container.txt", "fragmentation", "expandable-segments"),  # the "other" may be itself
    ("v1_reserved.txt", "fragmentation", "expandable-segments"),
    ("v1_reserved_max_split.txt", "fragmentation", "expandable-segments"),
    ("v1_cached.txt", "fragmentation", "expandable-segments"),
    ("v1_cached_tiny_free.txt", "fragmentation", "expandable-segments"),
    ("v2_hip_app_hint.txt", "fragmentation", "expandable-segments"),  # the app's own line after it changes nothing
    ("v2_docs_url_other_process.txt", "other-processes", "other-processes"),
    ("v2_several_processes.txt", "other-processes", "other-processes"),
    ("v21_capacty_wrapped.txt", "other-processes", "other-processes"),
    ("v2_too_large.txt", "too-large", "batch-size"),
    ("v113_cuda_oom_class_zero_free.txt", "too-large", "batch-size"),  # 10.73 GiB on an 8 GiB GPU
    ("v2_hip.txt", None, "clear"),
    ("v2_kib_free_truncated.txt", None, "clear"),
    ("v1_allowed_zero_bytes.txt", None, "clear"),
    ("v2_windows_bogus_process.txt", None, "clear"),  # the other process's figure is impossible: unknown
    ("async_allocator.txt", None, "clear"),  # cudaMallocAsync's message: no figures this parser reads
    ("async_allocator_name_only.txt", None, "clear"),  # the class name alone
    ("xpu_tensor_larger_than_free.txt", None, "clear"),  # XPU: no free figure, no cause named
    ("xpu_title.txt", None, "clear"),
    ("xpu_larger_than_capacity_free.txt", None, "clear"),
    ("xpu_level_zero_out_of_device_memory.txt", None, "clear"),  # Level Zero's code: no figures
    ("cuda_error_oom.txt", None, "clear"),  # no figures
    ("cublas_create_handle.txt", None, "clear"),
    ("v0_cuda_runtime_error.txt", None, "clear"),
]


@pytest.mark.parametrize("name, cause, first", FIRST_STEPS)
def test_each_diagnosis_puts_its_step_first(name: str, cause: Optional[str], first: str) -> None:
    info = parse_oom_message(message(name))
    d = diagnose(info, None, shell_with(), env={})
    steps = build_checklist(info, d)
    assert (d.causes[0].kind if d.causes else None) == cause
    assert steps[0].id == first
    if cause is not None:  # the cause's steps lead, in CAUSE_STEPS's order, where they may help
        leading = [k for k in CAUSE_STEPS[cause] if k in {step_key(s.id) for s in steps if s.not_applicable is None}]
        assert [step_key(s.id) for s in steps[: len(leading)]] == leading


def test_the_first_steps_cover_every_message_with_figures() -> None:
    named = {name for name, _, _ in FIRST_STEPS}
    parsed = [parse_oom_message(message(e["file"])) for e in CORPUS if e["oom"]]
    with_figures = {
        e["file"] for e, info in zip([e for e in CORPUS if e["oom"]], parsed) if info and info.format != "cuda-error"
    }
    assert with_figures <= named


def test_fragmentation_that_would_not_cover_the_request_alone_says_so() -> None:
    """v2_fragmentation: 9.35 GiB cached + 12.73 GiB free = 22.08 GiB, short of the 22.78 GiB request."""
    info = parse_oom_message(message("v2_fragmentation.txt"))
    d = diagnose(info, None, shell_with(), env={})
    assert [(c.kind, c.decisive) for c in d.causes] == [("fragmentation", False)]
    assert d.notes[0].startswith("Likely cause: fragmentation, 9.35 GiB reserved but unallocated, so expandable")
    assert "22.08 GiB of the 22.78 GiB requested: make the step smaller as well" in d.notes[0]
    d = diagnose(parse_oom_message(message("v2_this_process.txt")), None, shell_with(), env={})
    assert d.notes[0] == (
        "Likely cause: fragmentation, 194.87 MiB reserved but unallocated; that memory plus the free memory would "
        "have covered the request, so expandable segments come first"
    )


def test_another_kernel_holding_the_memory_puts_its_shutdown_first() -> None:
    probe = sample(
        processes=[
            {"pid": 1000, "name": "python", "used": GIB, "kernel_id": "mine", "this_kernel": True},
            {
                "pid": 4242,
                "name": "python",
                "used": int(30.5 * GIB),
                "kernel_id": "8f0c1d2e-other",
                "this_kernel": False,
            },
        ]
    )
    info = parse_oom_message(message("v2_docs_url_other_process.txt"))
    d = diagnose(info, probe, shell_with(), env={})
    steps = build_checklist(info, d, None, None, probe)
    assert [s.id for s in steps[:2]] == ["shutdown-8f0c1d2e-other", "other-processes"]


def test_tensors_the_traceback_keeps_alive_put_clear_first(monkeypatch: pytest.MonkeyPatch) -> None:
    pin = TracebackPin(frames=4, tensors=3, bytes=3 * GIB, by_device={"cuda:0": 3 * GIB})
    monkeypatch.setattr(diagnose_module, "_traceback_pin", lambda shell, tb: pin)
    info, d, steps = checklist(text=NO_CAUSE, probe=own_kernel_only())
    assert [(c.kind, c.bytes, c.decisive) for c in d.causes] == [("traceback", 3 * GIB, True)]
    assert ids(steps)[:2] == ["clear", "restart"]
    assert d.notes[0].startswith("Likely cause: the failed call's traceback keeps 3.00 GiB of tensors alive")


def test_low_host_memory_puts_the_host_steps_first_when_nothing_else_explains_it() -> None:
    probe = own_kernel_only()
    probe["host"]["available"] = GIB  # of 32 GiB
    _, d, steps = checklist(text=NO_CAUSE, probe=probe)
    assert [c.kind for c in d.causes] == ["host-memory"]
    assert ids(steps)[:2] == ["host-memory", "fewer-workers"]


def folded(steps) -> Dict[str, str]:
    return {s.id: s.not_applicable for s in steps if s.not_applicable is not None}


def test_steps_that_cannot_help_are_kept_last_with_the_reason() -> None:
    _, _, steps = checklist(text=NO_CAUSE, probe=own_kernel_only())
    assert folded(steps) == {"other-processes": "PyTorch's message lists no other process on this GPU."}
    assert steps[-1].id == "other-processes"
    # NVML listed this kernel and nobody else (a 1.x message does not list processes)
    info = parse_oom_message(message("v1_reserved.txt"))
    d = diagnose(info, own_kernel_only(), shell_with(), env={})
    assert folded(build_checklist(info, d, None, None, own_kernel_only())) == {
        "other-processes": "NVML lists no other process on this GPU."
    }
    # nobody could list the processes: the step may help
    info = parse_oom_message(message("v21_no_process_lines.txt"))
    d = diagnose(info, None, shell_with(), env={})
    assert "other-processes" not in folded(build_checklist(info, d, None, None, None))


def test_a_request_larger_than_the_gpu_folds_every_step_that_only_frees_memory() -> None:
    info = parse_oom_message(message("v2_too_large.txt"))
    d = diagnose(info, own_kernel_only(), shell_with(**training_namespace()), env={})
    steps = build_checklist(info, d, None, None, own_kernel_only())
    assert set(folded(steps)) == {"clear", "restart", "other-processes", "expandable-segments"}
    assert all("larger than all the memory this GPU allows" in why for why in folded(steps).values())
    assert ids(steps)[:5] == [
        "batch-size",
        "smaller-inputs",
        "mixed-precision",
        "grad-checkpointing",
        "grad-accumulation",
    ]
    assert [step_key(i) for i in ids(steps)[-4:]] == ["clear", "restart", "other-processes", "expandable-segments"]


def test_clear_folds_when_nothing_is_cached_and_the_traceback_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    text = NO_CAUSE.replace("412.00 MiB is reserved", "2.00 MiB is reserved")
    monkeypatch.setattr(diagnose_module, "_traceback_pin", lambda shell, tb: TracebackPin(5, 0, 0, {}))
    _, _, steps = checklist(text=text, probe=own_kernel_only())
    assert folded(steps)["clear"].startswith("PyTorch held only 2.00 MiB reserved but unallocated")
    monkeypatch.setattr(diagnose_module, "_traceback_pin", lambda shell, tb: None)  # unknown: it may help
    _, _, steps = checklist(text=text, probe=own_kernel_only())
    assert "clear" not in folded(steps)


def test_batch_size_one_folds_the_batch_steps() -> None:
    _, _, steps = checklist(text=NO_CAUSE, ns={"batch_size": 1}, probe=own_kernel_only())
    assert folded(steps)["batch-size"] == "The batch size is already 1: it cannot be made smaller."
    assert "grad-accumulation" in folded(steps)


def test_other_jupyter_kernels_get_a_shutdown_button_and_other_processes_are_listed() -> None:
    _, d, steps = checklist()
    shutdown = [s for s in steps if s.action == "shutdown-kernel"]
    assert [s.kernel_id for s in shutdown] == ["8f0c1d2e-other"]
    others = next(s for s in steps if s.id == "other-processes")
    assert "PID 777" in others.detail and "PID 4242" not in others.detail
    assert {p.pid: p.source for p in d.other_processes} == {4242: "both", 777: "both"}
    assert all(p.pid != 1000 for p in d.other_processes)  # this kernel is not "another process"


@pytest.mark.parametrize(
    "batch, recommendation, expected",
    [
        (32, None, (16, "half of 32")),
        (32, 12, (12, "the last %gpumem analyze recommendation")),
        (32, 48, (16, "half of 32")),  # a stale recommendation above the batch that failed is ignored
        (None, 8, (8, "the last %gpumem analyze recommendation")),
        (None, None, (None, "half of your current batch")),
        (1, None, (1, "half of 1")),
    ],
)
def test_suggested_batch(batch: Optional[int], recommendation: Optional[int], expected) -> None:
    assert suggested_batch(recommendation, batch) == expected


def test_batch_step_and_accumulation_use_the_computed_values() -> None:
    _, d, steps = checklist(ns=training_namespace(batch=30), recommendation=12)
    assert d.batch_size == 30 and d.batch_size_source == "train_dl.batch_size"
    step = {s.id: s for s in steps}
    assert step["batch-size"].title == "Reduce the batch size to 12"
    assert step["grad-accumulation"].title == "Accumulate gradients over 3 batches (effective batch 36)"
    assert "ACCUM_STEPS = 3" in step["grad-accumulation"].code
    assert "at most 15" in step["eval-batch-size"].detail  # 1.3 × 12


def test_batch_from_a_variable_and_unknown_batch() -> None:
    _, d, steps = checklist(ns={"BATCH_SIZE": 16})
    assert (d.batch_size, d.batch_size_source) == (16, "BATCH_SIZE")
    assert next(s for s in steps if s.id == "batch-size").title == "Reduce the batch size to 8"
    _, d, steps = checklist(ns={})
    assert d.batch_size is None
    assert next(s for s in steps if s.id == "batch-size").title == "Halve the batch size"
    assert "ACCUM_STEPS = 2" in next(s for s in steps if s.id == "grad-accumulation").code


def test_every_inserted_cell_compiles() -> None:
    cases = [
        checklist(),
        checklist(ns={}),
        checklist(probe=sample(capability="8.6")),
        checklist(env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}),
        checklist(text=message("v2_hip.txt")),
    ]
    for _, _, steps in cases:
        for step in steps:
            if step.action in ("insert-cell", "insert-env-cell-and-restart"):
                assert step.code, step.id
                compile(step.code, f"<{step.id}>", "exec")


def _run(code: str, ns: Dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # autocast("cuda") / GradScaler("cuda") warn and disable themselves on CPU
        exec(compile(code, "<snippet>", "exec"), ns)


def test_accumulation_and_mixed_precision_snippets_run_with_the_users_names() -> None:
    for capability in ("7.5", "8.6"):  # float16 + GradScaler, then bfloat16
        ns = training_namespace(workers=0)
        _, d, steps = checklist(ns=ns, probe=sample(capability=capability))
        assert (d.names.model, d.names.optimizer, d.names.loader, d.names.criterion, d.names.device) == (
            "model",
            "opt",
            "train_dl",
            "loss_fn",
            "device",
        )
        before = [p.detach().clone() for p in ns["model"].parameters()]
        for step_id in ("grad-accumulation", "mixed-precision"):
            _run(next(s for s in steps if s.id == step_id).code, ns)
        assert any(not torch.equal(a, p) for a, p in zip(before, ns["model"].parameters()))
        amp = next(s for s in steps if s.id == "mixed-precision")
        assert ("dtype=torch.bfloat16):" in amp.code) == (capability == "8.6")
        assert ("GradScaler(" in amp.code) == (capability != "8.6")


def test_inserted_code_names_only_identifiers_from_the_namespace() -> None:
    hostile = "x = 1; import os; os.system('echo owned')  #"
    base = training_namespace(workers=0)
    ns = {hostile: base["model"], "nonlocal": base["opt"], "loss fn()": base["loss_fn"], "train-dl": base["train_dl"]}
    for probe in (sample(capability="7.5"), sample(capability="8.6")):
        _, d, steps = checklist(ns=ns, probe=probe)
        assert d.model is not None and d.model.parameters > 0  # the model is still found and described
        assert (d.names.model, d.names.optimizer, d.names.criterion, d.names.loader) == (
            "model",
            "optimizer",
            "criterion",
            "train_loader",
        )  # placeholders the user fills
        for step in steps:
            if step.code:
                compile(step.code, f"<{step.id}>", "exec")
                assert all(key not in step.code for key in ns), step.id


def test_hugging_face_switch_is_not_called_on_a_non_identifier() -> None:
    class HFModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def gradient_checkpointing_enable(self) -> None:
            pass

    _, _, steps = checklist(ns={"m; import os": HFModel()})
    step = next(s for s in steps if s.id == "grad-checkpointing")
    assert step.code.strip().endswith("model.gradient_checkpointing_enable()") and "import os" not in step.code


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(8, 16)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x):
        x = self.stem(x)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


@pytest.mark.parametrize(
    "make_model, target",
    [
        (Net, "model.layers"),
        (lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)), "model"),
    ],
)
def test_checkpointing_snippet_wraps_the_largest_blocks_and_still_trains(make_model, target: str) -> None:
    ns = {"model": make_model()}
    _, d, steps = checklist(ns=ns)
    step = next(s for s in steps if s.id == "grad-checkpointing")
    assert f"{target} = torch.nn." in step.code
    _run(step.code, ns)
    model = ns["model"]
    assert any(type(m).__name__ == "Checkpointed" for m in model.modules())
    model(torch.randn(4, 8)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_hugging_face_models_use_their_own_switch() -> None:
    class HFModel(torch.nn.Module):
        is_gradient_checkpointing = False

        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 2)

        def gradient_checkpointing_enable(self) -> None:
            self.is_gradient_checkpointing = True

    ns = {"net": HFModel()}
    _, _, steps = checklist(ns=ns)
    step = next(s for s in steps if s.id == "grad-checkpointing")
    assert step.code.strip().endswith("net.gradient_checkpointing_enable()")
    _run(step.code, ns)
    _, _, steps = checklist(ns=ns)
    assert next(s for s in steps if s.id == "grad-checkpointing").action is None  # already on
    assert folded(steps)["grad-checkpointing"] == "`net` already has gradient checkpointing on."


def test_every_seed_checklist_step_is_covered() -> None:
    _, _, steps = checklist()
    present = set(ids(steps))
    missing = {seed: step for seed, step in SEED_STEPS.items() if step not in present}
    assert not missing
    assert len([k for k in SEED_STEPS if k.startswith("001")]) == 8  # that guide's checklist has 8 items


def test_fewer_workers_folds_without_workers() -> None:
    _, _, steps = checklist(ns=training_namespace(workers=0), probe=sample(children=0))
    assert folded(steps)["fewer-workers"].startswith("There are no DataLoader workers")
    _, _, steps = checklist(ns=training_namespace(workers=2), probe=sample(children=0))
    assert next(s for s in steps if s.id == "fewer-workers").title == "Use fewer DataLoader workers (2 → 1)"
    assert "fewer-workers" not in folded(steps)
    _, _, steps = checklist(ns={}, probe=sample(children=3))
    assert "fewer-workers" not in folded(steps)


def test_expandable_segments() -> None:
    _, d, steps = checklist(text=message("v2_this_process.txt"))
    step = next(s for s in steps if s.id == "expandable-segments")
    assert d.fragmentation.suggest and d.fragmentation.decisive  # 194.87 MiB cached could not serve 22 MiB
    assert step.action == "insert-env-cell-and-restart"
    assert 'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"' in step.code
    _, _, steps = checklist(env={"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})
    assert (
        '"max_split_size_mb:128,expandable_segments:True"'
        in next(s for s in steps if s.id == "expandable-segments").code
    )
    for env in (
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        {"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
    ):
        _, d, steps = checklist(text=message("v2_this_process.txt"), env=env)
        assert folded(steps)["expandable-segments"].startswith("Expandable segments are already on")
        assert d.fragmentation.expandable_segments_set and not d.fragmentation.suggest
        assert "fragmentation" not in [c.kind for c in d.causes]
    _, d, steps = checklist(text=message("v2_hip.txt"))
    assert 'os.environ["PYTORCH_HIP_ALLOC_CONF"]' in next(s for s in steps if s.id == "expandable-segments").code


@pytest.mark.parametrize(
    "name, suggest",
    [
        ("v2_this_process.txt", True),
        ("v2_fragmentation.txt", True),
        ("v1_reserved.txt", True),
        ("v2_docs_url_other_process.txt", False),
        ("v2_hip_allowed_private_pools.txt", True),
        ("v21_capacty_wrapped.txt", True),
        ("v2_windows_bogus_process.txt", False),
    ],
)
def test_fragmentation_threshold(name: str, suggest: bool) -> None:
    info = parse_oom_message(message(name))
    d = diagnose(info, None, shell_with(), env={})
    assert d.fragmentation.suggest is suggest


def test_diagnosis_notes_for_impossible_figures_and_oversized_requests() -> None:
    info = parse_oom_message(message("v2_windows_bogus_process.txt"))
    d = diagnose(info, None, shell_with(), env={})
    assert [p.used for p in d.other_processes] == [None]
    assert any("impossible" in note for note in d.notes)
    assert any("set_per_process_memory_fraction" in note for note in d.notes)
    steps = build_checklist(info, d, None, None)
    assert "17179869184" not in next(s for s in steps if s.id == "restart").detail
    d = diagnose(parse_oom_message(message("v2_too_large.txt")), None, shell_with(), env={})
    assert d.too_large and "freeing memory cannot help" in d.notes[0]
    d = diagnose(parse_oom_message(message("v21_one_process_container.txt")), None, shell_with(), env={})
    assert d.pid_unmatched


@pytest.mark.parametrize("name", sorted(e["file"] for e in CORPUS if e["oom"]))
def test_bundle_payload_matches_the_schema_for_every_real_message(name: str) -> None:
    bundle = checklist_bundle(message(name), shell_with(**training_namespace()), sample=sample(), env={})
    assert set(bundle) == {OOM_MIME, "text/html", "text/plain"}
    validate(bundle[OOM_MIME])


@pytest.mark.parametrize("name", sorted(e["file"] for e in CORPUS if not e["oom"]))
def test_real_messages_that_are_not_out_of_memory_get_no_checklist(name: str) -> None:
    assert checklist_bundle(message(name), shell_with(), sample=None) is None


def _bundle(name: str) -> Dict[str, Any]:
    return checklist_bundle(message(name), shell_with(**training_namespace()), sample=sample(), env={})[OOM_MIME]


def _folded(payload: Dict[str, Any]) -> Dict[str, str]:
    return {step["id"]: step["not_applicable"] for step in payload["steps"] if step["not_applicable"] is not None}


@pytest.mark.parametrize(
    "name", ["cublas_create_handle.txt", "cublas_debugger_form.txt", "cudnn_alloc_failed.txt", "nccl_warn_alloc.txt"]
)
def test_cublas_cudnn_and_nccl_fold_expandable_segments_and_clear_first(name: str) -> None:
    """They allocate outside PyTorch's caching allocator: expandable segments cannot help; returning PyTorch's
    cached blocks (clear) or other processes' memory can."""
    payload = _bundle(name)
    assert payload["info"]["format"] == "cuda-error" and payload["info"]["family"] == name.split("_")[0]
    assert "outside PyTorch's caching allocator" in _folded(payload)["expandable-segments"]
    first = [step_key(step["id"]) for step in payload["steps"]][:2]  # the probe lists another kernel
    assert first == (["clear", "restart"] if not name.startswith("nccl") else ["shutdown-*", "other-processes"])
    assert payload["diagnosis"]["notes"][0].startswith(("cuBLAS", "cuDNN", "NCCL"))


def test_a_driver_error_keeps_the_checklist_of_a_cuda_error() -> None:
    payload = _bundle("cuda_error_oom.txt")
    assert payload["info"]["family"] == "driver" and "expandable-segments" not in _folded(payload)


@pytest.mark.parametrize(
    "name", ["host_numpy_array_memory_error.txt", "host_cpu_allocator_cant_allocate.txt", "host_dataloader_killed.txt"]
)
def test_a_host_failure_is_about_workers_and_host_memory_not_the_gpu(name: str) -> None:
    payload = _bundle(name)  # training_namespace(): 2 workers
    ids = [step["id"] for step in payload["steps"]]
    assert payload["info"]["family"] == "host" and payload["summary"][0].startswith("Host memory (RAM)")
    assert ids[:3] == ["fewer-workers", "host-memory", "eval-batch-size"]
    workers = next(step for step in payload["steps"] if step["id"] == "fewer-workers")
    assert workers["title"] == "Use fewer DataLoader workers (2 → 1)"
    assert "pin_memory=True only with RAM to spare" in workers["detail"] and "persistent_workers" in workers["detail"]
    assert "1.3×" in next(step for step in payload["steps"] if step["id"] == "eval-batch-size")["detail"]
    assert {"other-processes", "expandable-segments", "mixed-precision", "grad-checkpointing"} <= set(_folded(payload))
    assert all("not the GPU's" in why for why in _folded(payload).values())


def test_the_host_step_names_the_container_limit() -> None:
    payload = checklist_bundle(message("host_dataloader_killed.txt"), shell_with(), sample=None, env={})[OOM_MIME]
    host = next(step for step in payload["steps"] if step["id"] == "host-memory")
    assert "memory.max" in host["detail"]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_halving_the_workers_counts_down_from_the_users_own() -> None:
    ns = training_namespace(workers=32)
    bundle = checklist_bundle(message("host_dataloader_killed.txt"), shell_with(**ns), sample=sample(), env={})
    payload = bundle[OOM_MIME]
    assert payload["steps"][0]["title"] == "Use fewer DataLoader workers (32 → 16 → 8)"


# A dataset whose worker ends itself with SIGKILL at its item KILLED_AT, as the kernel's out-of-memory killer ends one
_KILLED_WORKER_DATASET = """
import json, os, signal, sys, types
import torch
from torch.utils.data import DataLoader
from gpumem_kernel.oom.bundle import OOM_MIME, checklist_bundle
from gpumem_kernel.oom.classify import classify_exception

class KilledWorker(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if torch.utils.data.get_worker_info() is not None and i >= KILLED_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        return i
"""

_KILLED_WORKER_RUN = (
    "KILLED_AT = 4\n"
    + _KILLED_WORKER_DATASET
    + """
# plain ints (collate_fn=list): a tensor batch's shared-memory file descriptor fetched from a killed worker raises
# ConnectionResetError instead, a race of its own
loader = DataLoader(KilledWorker(), num_workers=2, batch_size=2, collate_fn=list, multiprocessing_context="fork")
try:
    for _ in loader:
        pass
except RuntimeError as error:
    shell = types.SimpleNamespace(user_ns={"loader": loader}, user_ns_hidden={})
    bundle = checklist_bundle(error, shell, sample=json.load(sys.stdin), env={})
    print(json.dumps(None if bundle is None else bundle[OOM_MIME]))
    sys.stdout.flush()
    os._exit(0)  # the other worker's SIGCHLD may still raise from PyTorch's handler anywhere after this
print("no error")
"""
)


def _last_line_of(script: str) -> Any:
    """Runs `script` in a Python process of its own (a probe sample on its stdin) and reads its last line's JSON."""
    run = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(sample()),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_a_dataloader_worker_killed_by_the_oom_killer_gets_the_host_checklist() -> None:
    """Which error the user sees is a race in PyTorch: its SIGCHLD handler raises "DataLoader worker (pid N) is
    killed by signal: Killed." in the loop itself, or the loop's next fetch raises "DataLoader worker (pid(s) N)
    exited unexpectedly" from it. Either way the checklist is the host's, and names the worker's message.

    The loop runs in its own process: PyTorch's SIGCHLD handler stays armed while the failed iterator is alive
    (the traceback holds it), and the second worker's death would raise inside whatever code runs next."""
    payload = _last_line_of(_KILLED_WORKER_RUN)
    assert payload is not None
    assert payload["info"]["family"] == "host" and "is killed by signal: Killed." in payload["info"]["message"]
    assert [step["id"] for step in payload["steps"]][:2] == ["fewer-workers", "host-memory"]
    assert payload["steps"][0]["title"] == "Use fewer DataLoader workers (2 → 1)"
    assert "expandable-segments" in _folded(payload)


_SILENT_DEATH_RUN = (
    "KILLED_AT = 2\n"
    + _KILLED_WORKER_DATASET
    + """
loader = DataLoader(KilledWorker(), num_workers=1, batch_size=2, collate_fn=list, multiprocessing_context="fork")
iterator = iter(loader)
# The death goes unheard, as when the fetch times out or breaks before PyTorch's SIGCHLD handler runs: the
# iterator's own check finds the dead worker and raises "exited unexpectedly" from queue.Empty.
signal.signal(signal.SIGCHLD, signal.SIG_DFL)
try:
    for _ in iterator:
        pass
except RuntimeError as error:
    shell = types.SimpleNamespace(user_ns={"loader": loader}, user_ns_hidden={})
    bundle = checklist_bundle(error, shell, sample=json.load(sys.stdin), env={})
    cause = type(error.__cause__).__name__
    print(json.dumps([str(error), cause, classify_exception(error), None if bundle is None else bundle[OOM_MIME]]))
    sys.stdout.flush()
    os._exit(0)
print(json.dumps(None))
"""
)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")
def test_a_killed_worker_whose_death_the_error_does_not_name_still_gets_the_host_checklist() -> None:
    """PyTorch's "exited unexpectedly" raised from a timed-out fetch names no signal: the iterator's exit code
    (-SIGKILL) says the host's out-of-memory killer ended it, and the checklist shows PyTorch's words for that."""
    message, cause, family, payload = _last_line_of(_SILENT_DEATH_RUN)
    assert re.fullmatch(r"DataLoader worker \(pid\(s\) \d+\) exited unexpectedly", message)
    assert cause == "Empty" and family == "host"
    assert payload["info"]["family"] == "host"
    pid = message.split("(pid(s) ")[1].split(")")[0]
    assert f"DataLoader worker (pid {pid}) is killed by signal: Killed." in payload["info"]["message"]
    assert [step["id"] for step in payload["steps"]][:2] == ["fewer-workers", "host-memory"]


def test_an_unexpected_exit_without_a_killed_worker_is_no_out_of_memory_error() -> None:
    """The same words without the iterator (a re-raised copy, a worker that exited by itself) are not the host's."""
    error = RuntimeError("DataLoader worker (pid(s) 4242) exited unexpectedly")
    assert checklist_bundle(error, shell_with(), sample=None, env={}) is None
    assert checklist_bundle(str(error), shell_with(), sample=None, env={}) is None


@pytest.mark.parametrize(
    "name, first, folded",
    [
        ("xla_jax_xla_runtime_error.txt", "shutdown-*", {"expandable-segments", "mixed-precision"}),
        ("mps_runtime_error.txt", "clear", {"expandable-segments", "other-processes"}),
        ("wrapper_vllm_cache_blocks.txt", "shutdown-*", {"batch-size", "grad-accumulation"}),
        ("wrapper_accelerate_batch_finder.txt", "mixed-precision", {"batch-size", "grad-accumulation"}),
    ],
)
def test_xla_mps_and_wrappers_get_the_steps_that_make_sense_there(name: str, first: str, folded: set) -> None:
    payload = _bundle(name)
    assert step_key(payload["steps"][0]["id"]) == first
    assert folded <= set(_folded(payload))
    assert payload["diagnosis"]["notes"][0]  # the family's note: what to change there


def test_every_family_names_itself_in_the_payload_and_the_text() -> None:
    seen = {}
    for entry in CORPUS:
        if entry["oom"]:
            bundle = checklist_bundle(message(entry["file"]), shell_with(), sample=None, env={})
            assert bundle[OOM_MIME]["info"]["family"] == entry["family"], entry["file"]
            seen[entry["family"]] = bundle["text/plain"].splitlines()[0]
    assert len(seen) == 10 and len(set(seen.values())) >= 9  # cuda_allocator and xpu share the allocator's line


def test_a_torch_out_of_memory_error_with_its_own_text_gets_a_checklist_from_text_too() -> None:
    """The browser recognises torch.OutOfMemoryError by its name alone and sends "ename: evalue"."""
    bundle = checklist_bundle("OutOfMemoryError: Allocation on device ", shell_with(), sample=None, env={})
    assert bundle[OOM_MIME]["info"]["format"] == "unknown"
    assert bundle[OOM_MIME]["info"]["exception"] == "OutOfMemoryError"
    assert checklist_bundle("OutOfMemoryError", shell_with(), sample=None, env={}) is not None
    assert checklist_bundle("ValueError: Allocation on device ", shell_with(), sample=None) is None


def test_bundle_without_probe_or_namespace_matches_the_schema() -> None:
    info = parse_oom_message(V2)
    d = diagnose(info, None, shell_with(), env={})
    validate(oom_bundle(info, d, build_checklist(info, d, None, None))[OOM_MIME])


def test_schema_is_strict() -> None:
    bundle = checklist_bundle(V2, shell_with(), sample=sample(), env={})
    payload = json.loads(json.dumps(bundle[OOM_MIME]))
    payload["steps"][0]["extra"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate(payload)
    payload = json.loads(json.dumps(bundle[OOM_MIME]))
    shutdown = next(s for s in payload["steps"] if s["action"] == "shutdown-kernel")
    shutdown["kernel_id"] = None
    with pytest.raises(jsonschema.ValidationError):
        validate(payload)


def test_plain_text_is_a_numbered_checklist() -> None:
    bundle = checklist_bundle(V2, shell_with(**training_namespace()), sample=sample(), env={})
    text = bundle["text/plain"]
    steps = bundle[OOM_MIME]["steps"]
    numbered = [line for line in text.splitlines() if line[:3].strip().rstrip(".").isdigit()]
    assert len(numbered) == len(steps)
    assert numbered[0].startswith(" 1. [ ] Shut down the notebook kernel 8f0c1d2e")
    assert "Checklist (likely cause first, then cheapest):" in text
    assert text.startswith("CUDA out of memory on GPU 0: tried to allocate 20.00 MiB")


def test_plain_text_and_html_fold_the_steps_that_cannot_help() -> None:
    probe = own_kernel_only(children=0)
    bundle = checklist_bundle(NO_CAUSE, shell_with(**training_namespace(workers=0)), sample=probe, env={})
    lines = bundle["text/plain"].splitlines()
    assert "Checklist (cheapest first):" in lines
    at = lines.index("Not applicable here (2):")
    # 12 applicable steps: the 11 of every checklist and "Compute what makes it fit" for the namespace's model
    assert " 3. [ ] Compute what makes it fit  [insert-cell]" in lines
    assert lines[at + 1].startswith("13. [ ] Check other processes on the GPU")
    assert lines[at + 2] == "      Not applicable: PyTorch's message lists no other process on this GPU."
    assert lines[at + 4].startswith("14. [ ] Use fewer DataLoader workers")
    page = bundle["text/html"]
    assert '<details><summary>Not applicable here (2)</summary><ol start="13">' in page
    assert (
        page.index('data-step="clear"') < page.index("Not applicable here") < page.index('data-step="other-processes"')
    )


def test_hostile_strings_are_escaped_in_html() -> None:
    hostile = V2.replace("Tried to allocate", "<script>alert('x')</script> Tried to allocate")
    probe = sample(
        processes=[
            {"pid": 4242, "name": "python", "used": GIB, "kernel_id": '"><script>k</script>', "this_kernel": False},
            {"pid": 4343, "name": "<b onmouseover=alert(1)>", "used": GIB, "kernel_id": None, "this_kernel": False},
        ]
    )
    bundle = checklist_bundle(hostile, shell_with(), sample=probe, env={})
    page = bundle["text/html"]
    assert "<script" not in page and "<b " not in page
    assert "&lt;script&gt;" in page and "&lt;b onmouseover" in page
    validate(bundle[OOM_MIME])


def test_not_an_oom_gives_no_report() -> None:
    assert checklist_bundle("ValueError: nope", shell_with(), sample=None) is None
    assert checklist_bundle(RuntimeError("shape mismatch"), shell_with(), sample=None) is None
    bundle = checklist_bundle(torch.OutOfMemoryError("custom text"), shell_with(), sample=None, env={})
    assert bundle[OOM_MIME]["info"]["format"] == "unknown"


def test_eval_cap_and_quarter_steps_follow_the_seed() -> None:
    _, _, steps = checklist(ns={"batch_size": 16})
    batch = next(s for s in steps if s.id == "batch-size")
    assert "16 → 12 → 8" in batch.detail  # the host-memory guide: 16 → 12 → 8 → 6
    assert "drop_last=True" in batch.detail
    evaluation = next(s for s in steps if s.id == "eval-batch-size")
    assert f"at most {math.floor(8 * 1.3)}" in evaluation.detail


def test_the_cause_note_is_not_repeated_by_the_fragmentation_line() -> None:
    info = parse_oom_message(message("v2_this_process.txt"))
    d = diagnose(info, None, shell_with(), env={})
    findings = [
        line
        for line in oom_bundle(info, d, build_checklist(info, d))["text/plain"].splitlines()
        if line.startswith("  - ")
    ]
    assert [line for line in findings if "194.87 MiB" in line] == [f"  - {d.notes[0]}"]  # the "Likely cause" note only


def test_the_handler_adds_the_checklist_under_a_host_memory_error_and_a_vllm_value_error() -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from gpumem_kernel.oom.handler import install_oom_handler, uninstall_oom_handler

    sh = InteractiveShell.instance()
    try:
        install_oom_handler(sh, probe=lambda: None)
        assert {RuntimeError, MemoryError, ValueError} <= set(sh.custom_exceptions)
        families = []
        for code in (
            "raise MemoryError('Unable to allocate 3.00 GiB for an array with shape (3,) and data type float64')",
            "raise ValueError('No available memory for the cache blocks. Try increasing `gpu_memory_utilization`')",
            "raise ValueError('shapes do not match')",
        ):
            with capture_output() as captured:
                sh.run_cell(code, store_history=False)
            families.append([o.data[OOM_MIME]["info"]["family"] for o in captured.outputs if OOM_MIME in o.data])
        assert families == [["host"], ["wrapper"], []]
    finally:
        uninstall_oom_handler(sh)
        sh.set_custom_exc((), None)
