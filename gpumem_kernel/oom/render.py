"""The checklist as text/plain and as static escaped HTML: the summary, the diagnosis lines, what was alive at
the error, and the numbered steps with those that cannot help folded last."""

from __future__ import annotations

import html
import os
from typing import Any, List, Mapping, Optional, Sequence

from gpumem_kernel.oom.diagnosis import Diagnosis
from gpumem_kernel.oom.family import wrapper_kind
from gpumem_kernel.oom.parse import OomInfo
from gpumem_kernel.oom.step import Step, plural
from gpumem_kernel.render.units import human


_FAMILY_SUMMARY = {
    "cublas": "cuBLAS could not allocate its handle or workspace (CUBLAS_STATUS_ALLOC_FAILED): the GPU is full",
    "cudnn": "cuDNN could not allocate its handle or workspace (CUDNN_STATUS_ALLOC_FAILED): the GPU is full",
    "nccl": "NCCL ran out of GPU memory for its buffers (Cuda failure 'out of memory')",
    "mps": "MPS (Apple GPU) out of memory: the GPU's share of the Mac's RAM is used up",
    "xla": "XLA out of memory (RESOURCE_EXHAUSTED): JAX, TensorFlow or PyTorch/XLA",
    "host": "Host memory (RAM) out of memory: the CPU side ran out, not the GPU",
}
_WRAPPER_SUMMARY = {
    "accelerate": "accelerate found no batch size that fits (its batch-size finder reached zero)",
    "vllm": "vLLM out of memory: no room left for the KV cache",
}


def summary(info: OomInfo) -> List[str]:
    where = f" on GPU {info.device}" if info.device is not None else ""
    if info.format == "cuda-error" and info.family in _FAMILY_SUMMARY:
        return [_FAMILY_SUMMARY[info.family]]
    if info.family == "wrapper":
        return [_WRAPPER_SUMMARY[wrapper_kind(info)]]
    if info.format == "cuda-error":
        return [f"{info.backend} error: out of memory{where} (a CUDA call outside PyTorch's allocator; no figures)"]
    first = f"{info.backend} out of memory{where}"
    if info.tried_to_allocate is not None:
        first += f": tried to allocate {human(info.tried_to_allocate)}"
    if info.free is not None:
        first += f"; {human(info.free)} free of {human(info.total_capacity)}"
    lines = [first]
    pytorch = []
    if info.allocated_by_pytorch is not None:
        pytorch.append(f"{human(info.allocated_by_pytorch)} allocated")
    if info.private_pools:
        pytorch.append(f"{human(info.private_pools)} of it in private pools (CUDA Graphs)")
    if info.cached() is not None:
        pytorch.append(f"{human(info.cached())} reserved but unallocated")
    if pytorch:
        lines.append("PyTorch: " + ", ".join(pytorch))
    if info.this_process_total is not None:
        lines.append(f"This process (NVML, with the CUDA context): {human(info.this_process_total)}")
    return lines


def _diagnosis_lines(d: Diagnosis) -> List[str]:
    lines = list(d.notes)
    if d.evaluation is not None:
        lines.append(f"In evaluation (gradients off): {d.evaluation}")
    f = d.fragmentation
    named = bool(d.causes) and d.causes[0].kind == "fragmentation"  # the "Likely cause" note gives the figure
    if f is not None and f.suggest and not named:
        lines.append(f"Fragmentation: {human(f.reserved_unallocated)} reserved but unallocated")
    elif f is not None and f.expandable_segments_set:
        lines.append(f"Expandable segments are already on ({d.alloc_conf_var})")
    holding = [p for p in d.other_processes if p.used]
    # what the notebook started is the user's to stop in its own cell: never listed among someone else's
    started = [p for p in holding if p.child_of_kernel]
    others = [p for p in holding if not p.child_of_kernel]
    if started:
        # its PID in this namespace where known: the one `kill` or `ps` here understands
        named = (f"PID {p.local_pid if p.local_pid is not None else p.pid} ({human(p.used)})" for p in started[:6])
        lines.append("Started from this notebook: " + ", ".join(named))
    if others:
        lines.append("Other processes: " + ", ".join(f"PID {p.pid} ({human(p.used)})" for p in others[:6]))
    if d.traceback and d.traceback.tensors:
        lines.append(
            f"The failed call's traceback keeps {plural(d.traceback.tensors, 'tensor')} "
            f"({human(d.traceback.bytes)}) alive"
        )
    if d.batch_size:
        lines.append(f"Batch size in use: {d.batch_size} ({d.batch_size_source})")
    if d.host and d.host.low:
        lines.append("Host memory is nearly exhausted")
    return lines


def source_line(source: Optional[Mapping[str, Any]]) -> str:
    """ "In [5], line 3" for a notebook cell, else "model.py:42 in forward"; "no line recorded" without one."""
    if not source:
        return "no line recorded"
    if source.get("cell") is not None:
        return f"In [{source['cell']}], line {source['line']}"
    return f"{os.path.basename(str(source.get('file', '?')))}:{source.get('line')} in {source.get('name')}"


def _alive_lines(alive: Mapping[str, Any], top: int = 5) -> List[str]:
    lines = [f"What was alive at the error: {human(alive['allocated'])} in {plural(alive['blocks'], 'block')}"]
    for holder in alive["holders"][:top]:
        count = f" ×{holder['count']}" if holder["count"] > 1 else ""
        lines.append(f"{human(holder['size'])} {holder['category']}{count}: {source_line(holder['source'])}")
    failed = alive.get("failed")
    if failed:
        lines.append(f"Failed: {human(failed['size'])} at {source_line(failed['source'])}")
    return lines


def _steps_heading(d: Diagnosis) -> str:
    likely = d.causes or d.evaluation is not None
    return "Checklist (likely cause first, then cheapest)" if likely else "Checklist (cheapest first)"


def oom_text(info: OomInfo, d: Diagnosis, steps: Sequence[Step], alive: Optional[Mapping[str, Any]] = None) -> str:
    lines = summary(info) + [f"  - {line}" for line in _diagnosis_lines(d)]
    if alive is not None:
        found = _alive_lines(alive)
        lines += [found[0] + ":"] + [f"    {line}" for line in found[1:]]
    lines.append(f"{_steps_heading(d)}:")
    folded = [s for s in steps if s.not_applicable is not None]
    for number, step in enumerate(steps, 1):
        if folded and step is folded[0]:
            lines.append(f"Not applicable here ({len(folded)}):")
        button = f"  [{step.action}]" if step.action else ""
        lines.append(f"{number:2d}. [ ] {step.title}{button}")
        if step.not_applicable is not None:
            lines.append(f"      Not applicable: {step.not_applicable}")
        if step.figure is not None:
            lines.append(f"      {step.figure.text}")
        lines.append(f"      {step.detail}")
        if step.code:
            lines.extend(f"        {line}" for line in step.code.rstrip("\n").split("\n"))
    return "\n".join(lines)


def oom_html(info: OomInfo, d: Diagnosis, steps: Sequence[Step], alive: Optional[Mapping[str, Any]] = None) -> str:
    e = html.escape
    parts = ['<div class="gpumem-oom">', f"<h4>{e(summary(info)[0])} — checklist</h4>"]
    parts.extend(f"<p>{e(line)}</p>" for line in summary(info)[1:])
    diagnosis = _diagnosis_lines(d)
    if diagnosis:
        parts.append("<ul>" + "".join(f"<li>{e(line)}</li>" for line in diagnosis) + "</ul>")
    if alive is not None:
        found = _alive_lines(alive)
        parts.append(f"<p>{e(found[0])}</p><ul>" + "".join(f"<li>{e(line)}</li>" for line in found[1:]) + "</ul>")
    parts.append(f"<details><summary>PyTorch's message</summary><pre>{e(info.message)}</pre></details>")
    parts.append(f"<p><strong>{e(_steps_heading(d))}</strong></p><ol>")
    folded = [s for s in steps if s.not_applicable is not None]
    for number, step in enumerate(steps, 1):
        if folded and step is folded[0]:
            parts.append(f'</ol><details><summary>Not applicable here ({len(folded)})</summary><ol start="{number}">')
        code = f"<pre><code>{e(step.code)}</code></pre>" if step.code else ""
        why = f"<br><em>Not applicable: {e(step.not_applicable)}</em>" if step.not_applicable is not None else ""
        figure = f"<br><strong>{e(step.figure.text)}</strong>" if step.figure is not None else ""
        parts.append(
            f'<li data-step="{e(step.id)}"><strong>{e(step.title)}</strong>{why}{figure}<br>{e(step.detail)}{code}</li>'
        )
    parts.append("</ol></details></div>" if folded else "</ol></div>")
    return "".join(parts)
