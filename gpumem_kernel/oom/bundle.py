"""The checklist's MIME bundle: oom_bundle renders the parts; checklist_bundle parses, probes, diagnoses and
renders it in one call (for the handler and the comm). Like clear_bundle, rerun_bundle and status_bundle: a
function named *_bundle turns a result into the display bundle."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import asdict
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

from gpumem_kernel.oom.analyzed import AnalyzedModel, batch_pick
from gpumem_kernel.oom.checklist import build_checklist
from gpumem_kernel.oom.classify import is_oom, killed_worker, oom_error_name, oom_in_chain
from gpumem_kernel.oom.diagnose import diagnose_failed
from gpumem_kernel.oom.diagnosis import Diagnosis
from gpumem_kernel.oom.figures import Advise, find_advice
from gpumem_kernel.oom.parse import MESSAGE_LIMIT, OomInfo, parse_oom_message
from gpumem_kernel.oom.render import oom_html, oom_text, summary
from gpumem_kernel.oom.rerun import timeline_rerun_step, with_rerun_step
from gpumem_kernel.oom.step import Step
from gpumem_kernel.probe.processes import own_create_time
from gpumem_kernel.probe.snapshot import take_sample

OOM_MIME = "application/vnd.gpumem.oom.v1+json"
PAYLOAD_VERSION = 1


def occurrence() -> Dict[str, Any]:
    """Which error a checklist is about: one out-of-memory error in one run of this kernel process. The
    browser keeps the checklist's ticks under `id` (a new error starts unticked), and tells a checklist of an
    earlier kernel run by (`kernel_pid`, `kernel_start`), which `hello` carries as (`pid`, `create_time`)."""
    return {
        "id": uuid.uuid4().hex,
        "kernel_pid": os.getpid(),
        "kernel_start": own_create_time(),
        "time": time.time(),
    }


def oom_bundle(
    info: OomInfo, diagnosis: Diagnosis, steps: Sequence[Step], alive: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """MIME bundle for display(..., raw=True): the rich payload, static escaped HTML, a numbered checklist.
    `alive`: what the OOM capture found alive at the error (timeline.capture.alive_at_oom), when it ran."""
    payload = {
        "version": PAYLOAD_VERSION,
        "summary": summary(info),
        "info": info.to_payload(),
        "diagnosis": diagnosis.to_payload(),
        "steps": [asdict(s) for s in steps],
        "occurrence": occurrence(),
    }
    if alive is not None:
        payload["alive"] = alive
    return {
        OOM_MIME: payload,
        "text/html": oom_html(info, diagnosis, steps, alive),
        "text/plain": oom_text(info, diagnosis, steps, alive),
    }


def _unparsed_oom_name(source: Any, text: str) -> Optional[str]:
    """The class name of an out-of-memory error whose text holds no known message (a torch.OutOfMemoryError
    with its own text, e.g. re-raised by an app), or None when `source` is not an out-of-memory error."""
    if isinstance(source, str):
        return oom_error_name(text)
    return type(source).__name__ if is_oom(source) else None


def checklist_bundle(
    source: Any,
    shell: Any = None,
    *,
    sample: Optional[Mapping[str, Any]] = None,
    tb: Any = None,
    analyzed: Optional[AnalyzedModel] = None,
    batch_size: Optional[int] = None,
    env: Optional[Mapping[str, str]] = None,
    capture: Optional[Callable[..., Optional[Dict[str, Any]]]] = None,
    cell: Optional[str] = None,
    advise: Optional[Advise] = None,
) -> Optional[Dict[str, Any]]:
    """One call for the handler and the comm: parse an exception or message text, probe, diagnose and
    return the checklist bundle; None when `source` is not an out-of-memory error.

    `analyzed`: what the last `%gpumem analyze` was for; its batch is offered only when it is for the model that
    failed (oom.analyzed);
    `capture(tried, device, title)`: what the OOM capture (setting "oomTimeline", timeline.capture.alive_at_oom)
    found alive at this error, or None; the extension passes it to the handler;
    `cell`: the failed cell's source, for the step "Re-run this cell with the timeline on" (offered when no
    capture is attached);
    `advise(model, **request_fields)`: computes the fit advice for a small failed model now (oom.figures; the
    loaded extension hands the handler one); the last analysis' advice for it is used either way, and a larger
    model (or none given) gets the step that computes it."""
    chained = oom_in_chain(source) if isinstance(source, BaseException) else None
    if chained is not None:  # the error it was raised from says what ran out (a DataLoader worker's death)
        source = chained[0]
    text = source if isinstance(source, str) else f"{type(source).__name__}: {source}"
    death = None if isinstance(source, str) else killed_worker(source)
    if death is not None:  # its cause does not say why the worker died; the iterator's exit code does
        text = f"{text}: {death}"
    info = parse_oom_message(text)
    if info is None:  # a torch.OutOfMemoryError whose text is none of the known messages
        name = _unparsed_oom_name(source, text)
        if name is None:
            return None
        info = OomInfo("unknown", "CUDA", name, " ".join(text.split())[:MESSAGE_LIMIT])
    alive = None
    if capture is not None:
        count = getattr(shell, "execution_count", None)
        title = f"In [{count}], out of memory" if isinstance(count, int) else "out of memory"
        alive = capture(info.tried_to_allocate, info.device, title)
    sample = take_sample() if sample is None else sample
    diagnosis, failed = diagnose_failed(info, sample, shell, tb=tb, env=env)
    pick = batch_pick(analyzed, failed, batch_size or diagnosis.batch_size)
    batch = batch_size or diagnosis.batch_size
    advice, advice_step = find_advice(analyzed, failed, batch, info, diagnosis, advise)
    steps = build_checklist(info, diagnosis, pick.recommended, batch_size, sample, pick.hint, advice, advice_step)
    rerun = timeline_rerun_step(cell) if alive is None else None
    if rerun is not None:
        steps = with_rerun_step(steps, rerun)
    return oom_bundle(info, diagnosis, steps, alive)
