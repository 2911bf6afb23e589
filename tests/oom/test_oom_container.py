"""The OOM checklist in a container: NVML and PyTorch's message name host PIDs. It never asks to kill this kernel
(or a probable or ambiguous candidate), still names the real other holders as a cause, and names the processes
started from this notebook as the user's own."""

from __future__ import annotations

import json
import types
from typing import Any, Dict, List, Optional

import jsonschema

from gpumem_kernel.oom.bundle import OOM_MIME, checklist_bundle
from gpumem_kernel.oom.checklist import build_checklist
from gpumem_kernel.oom.diagnose import diagnose
from gpumem_kernel.oom.parse import parse_oom_message
from gpumem_kernel.wire.protocol import load_payload_schema, validate

GiB = 1024**3
MiB = 1024**2
ME, HOST_ME, HOST_OTHER, HOST_CHILD, EXTERNAL = 57, 4_000_000, 4_000_100, 4_000_200, 3_900_000

MESSAGE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.00 GiB is free. Process 4000000 has 30.00 GiB memory in use. Process 3900000 has "
    "40.00 GiB memory in use. Process 4000200 has 8.00 GiB memory in use. Of the allocated memory 29.00 GiB is "
    "allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but unallocated."
)


def process(pid: int, used: int, relation: str, **extra: Any) -> Dict[str, Any]:
    base = {
        "pid": pid,
        "name": None,
        "used": used,
        "kernel_id": None,
        "this_kernel": relation == "this_kernel",
        "relation": relation,
        "note": None,
        "local_pid": None,
        "create_time": None,
        "cmdline": None,
    }
    return {**base, **extra}


def sample(processes: List[Dict[str, Any]]) -> Dict[str, Any]:
    device = {
        "nvml_index": 0,
        "cuda_index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-1",
        "mig": False,
        "total": 85 * GiB,
        "used": 78 * GiB,
        "free": 1 * GiB,
        "util_gpu": 90,
        "util_mem": 40,
        "compute_capability": "9.0",
        "sm_count": 132,
        "this_kernel": 30 * GiB,
        "allocator": None,
        "processes": processes,
    }
    return {
        "type": "sample",
        "seq": 3,
        "time": 1.0,
        "gpu": {
            "available": True,
            "reason": None,
            "driver_version": "550.54.15",
            "cuda_driver_version": "12.4",
            "visible_devices": None,
            "device_order": "FASTEST_FIRST",
            "devices": [device],
        },
        "kernel": {
            "pid": ME,
            "gpu_used": 30 * GiB,
            "torch": {"imported": True, "version": None, "cuda_initialized": True},
        },
        "host": {
            "rss": GiB,
            "total": 64 * GiB,
            "available": 32 * GiB,
            "children": {"count": 1, "rss": GiB},
            "container_limit": None,
            "container_usage": None,
        },
        "errors": [],
    }


def shell() -> Any:
    return types.SimpleNamespace(user_ns={}, user_ns_hidden={})


def child() -> Dict[str, Any]:
    return process(HOST_CHILD, 8 * GiB, "notebook", local_pid=88, create_time=5.0, cmdline="python train.py --big")


def steps_for(relation: str, extra: Optional[List[Dict[str, Any]]] = None):
    processes = [process(HOST_ME, 30 * GiB, relation), process(EXTERNAL, 40 * GiB, "external"), child()]
    probe = sample(processes + (extra or []))
    validate(probe)
    info = parse_oom_message(MESSAGE)
    d = diagnose(info, probe, shell(), env={})
    return d, build_checklist(info, d, None, None, probe)


def other_step(steps) -> str:
    return next(s for s in steps if s.id == "other-processes").detail


def test_the_kernels_host_pid_is_never_another_process_nor_to_be_killed() -> None:
    for relation in ("this_kernel", "probably_this_kernel"):
        d, steps = steps_for(relation)
        assert HOST_ME not in {p.pid for p in d.other_processes}
        assert d.this_kernel_pids == [HOST_ME] and not d.pid_unmatched
        detail = other_step(steps)
        assert "PID 3900000" in detail and "End the ones you own" in detail
        assert f"PID {HOST_ME} (" not in detail and "never kill it" in detail
        assert any("Process 4000000 in PyTorch's message is this kernel itself" in n for n in d.notes)


def test_the_real_other_holders_are_still_the_cause_and_the_notebooks_processes_are_named_apart() -> None:
    d, steps = steps_for("this_kernel")
    assert [c.kind for c in d.causes][:1] == ["other-processes"]
    assert d.causes[0].bytes == 48 * GiB
    assert d.notes[0].startswith(
        "Likely cause: processes started from this notebook hold 8.00 GiB and other processes 40.00 GiB"
    )
    mine = next(p for p in d.other_processes if p.pid == HOST_CHILD)
    assert (mine.child_of_kernel, mine.local_pid, mine.cmdline) == (True, 88, "python train.py --big")
    detail = other_step(steps)
    assert "Started from this notebook: PID 88 `python train.py --big` (8.00 GiB)" in detail
    assert "kill 88" not in detail and "PID 4000200" not in detail


def test_ambiguous_candidates_are_neither_others_nor_to_be_killed() -> None:
    d, steps = steps_for("ambiguous", [process(HOST_OTHER, 30 * GiB, "ambiguous")])
    assert {p.pid for p in d.other_processes} == {EXTERNAL, HOST_CHILD}
    assert sorted(d.this_kernel_pids) == [HOST_ME, HOST_OTHER]
    detail = other_step(steps)
    assert "PID 4000000 (" not in detail and "PID 4000100 (" not in detail and "never kill it" in detail


def test_without_what_the_sample_learned_no_process_of_the_message_is_to_be_killed() -> None:
    info = parse_oom_message(MESSAGE)
    d = diagnose(info, None, shell(), env={})
    assert d.pid_unmatched
    assert "other-processes" not in [c.kind for c in d.causes]
    detail = other_step(build_checklist(info, d, None, None, None))
    assert "probably this kernel itself" in detail and "kill" not in detail


def test_the_payload_with_host_pids_matches_the_schema() -> None:
    processes = [process(HOST_ME, 30 * GiB, "probably_this_kernel"), process(EXTERNAL, 40 * GiB, "external"), child()]
    bundle = checklist_bundle(MESSAGE, shell(), sample=sample(processes), env={})
    assert bundle is not None
    payload = json.loads(json.dumps(bundle[OOM_MIME]))
    jsonschema.Draft202012Validator(load_payload_schema("oom")).validate(payload)
    assert payload["diagnosis"]["this_kernel_pids"] == [HOST_ME]


def test_the_text_card_lists_the_notebooks_processes_apart_from_the_other_processes() -> None:
    processes = [process(HOST_ME, 30 * GiB, "this_kernel"), process(EXTERNAL, 40 * GiB, "external"), child()]
    bundle = checklist_bundle(MESSAGE, shell(), sample=sample(processes), env={})
    assert bundle is not None
    lines = bundle["text/plain"].splitlines()
    assert "- Started from this notebook: PID 88 (8.00 GiB)" in [line.strip() for line in lines]
    other = next(line for line in lines if "Other processes:" in line)
    assert "PID 3900000 (40.00 GiB)" in other and "4000200" not in other and "4000000" not in other
