"""`%gpumem status` in a container: this kernel by its host PID, probable and ambiguous matches, the notebook's own
processes with their command line, and the device rows for them."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict

from gpumem_kernel.probe.host import HostReader
from gpumem_kernel.render.status import render_html, render_text

GiB = 1024**3


def process(pid: int, used: int, relation: str, **extra: Any) -> Dict[str, Any]:
    return {
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
        **extra,
    }


def sample(*processes: Dict[str, Any], **device: Any) -> Dict[str, Any]:
    gpu = {
        "nvml_index": 0,
        "cuda_index": 0,
        "name": "NVIDIA H100",
        "mig": False,
        "total": 80 * GiB,
        "used": 40 * GiB,
        "free": 40 * GiB,
        "processes": list(processes),
        **device,
    }
    return {"gpu": {"available": True, "devices": [gpu]}, "host": dataclasses.asdict(HostReader().read())}


def lines(text: str) -> Dict[str, str]:
    return {line.split()[1]: line for line in text.splitlines() if line.startswith("  PID ")}


def test_the_process_rows_say_who_each_host_pid_is() -> None:
    text = render_text(
        sample(
            process(4000000, 6 * GiB, "this_kernel", local_pid=57),
            process(4000200, 2 * GiB, "notebook", local_pid=88, cmdline="python train.py --epochs 3"),
            process(3900000, 30 * GiB, "external"),
            this_kernel=6 * GiB,
            notebook_processes=2 * GiB,
        )
    )
    rows = lines(text)
    assert rows["4000000"].endswith("this kernel (local PID 57)")
    assert rows["4000200"].endswith("started from this notebook (local PID 88): python train.py --epochs 3")
    assert rows["3900000"].endswith("external")
    assert "Started here:     2.00 GiB (2.5%)" in text


def test_probable_and_ambiguous_matches_are_never_external() -> None:
    note = "this kernel is one of host PIDs 4000000, 4000100 (they cannot be told apart yet)"
    text = render_text(
        sample(
            process(4000000, GiB, "ambiguous", note=note),
            process(4000100, GiB, "ambiguous", note=note),
            uncertain=2 * GiB,
        )
    )
    assert all(row.endswith(note) for row in lines(text).values())
    assert "Kernel or other:  2.00 GiB (2.5%)" in text
    probable = render_html(sample(process(4000000, GiB, "probably_this_kernel")))
    assert "probably this kernel (not yet confirmed)" in probable


def test_a_sample_from_an_older_kernel_still_reads() -> None:
    old = {"pid": 1234, "name": "python", "used": GiB, "kernel_id": "8f0c1d2e-x", "this_kernel": False}
    assert lines(render_text(sample(old)))["1234"].endswith("kernel 8f0c1d2e")
