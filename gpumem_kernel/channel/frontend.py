"""Entry points for the browser's silent executes: actions that touch user objects run on the main thread.

On ipykernel 7 with JupyterLab >= 4.4 comm messages are handled on a subshell thread, concurrently with a
running cell; deleting references or walking the namespace there would race the user's code. So the browser
runs these as a silent execute (queued behind the running cell) whose `user_expressions` call e.g.
`__import__('gpumem_kernel').frontend.clear()`, exactly like the bootstrap. Each returns a JSON **string**
and never raises: `{"ok": true, ...}` or `{"ok": false, "error": "one line"}` (schemas/README.md).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # IOPub tracebacks carry colour codes
_TEXT_LIMIT = 100_000
_ERROR_LIMIT = 300


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    lines = text.strip().splitlines() or [type(exc).__name__]
    return lines[0][:_ERROR_LIMIT]


def _respond(build: Callable[[], Dict[str, Any]]) -> str:
    """`{"ok": true, **build()}` as JSON, or `{"ok": false, "error": ...}` whatever went wrong."""
    try:
        return json.dumps({"ok": True, **build()}, allow_nan=False)  # NaN is not JSON: JSON.parse would fail
    except (Exception, KeyboardInterrupt) as exc:  # an interrupt while queued must not print a traceback
        return json.dumps({"ok": False, "error": _one_line(exc)})


def _shell() -> Any:
    from gpumem_kernel.clear.reclaim import resolve_shell

    return resolve_shell()


def clear(dry_run: bool = False) -> str:
    """The safe clear (traceback, output cache, gc, empty_cache when CUDA is initialised); never deletes
    user variables. `{"ok": true, "report": <application/vnd.gpumem.clear.v1+json payload>}`."""

    def build() -> Dict[str, Any]:
        if not isinstance(dry_run, bool):
            raise TypeError(f"dry_run must be true or false, got {dry_run!r}")
        from gpumem_kernel.clear.reclaim import clear_gpu_memory

        return {"report": clear_gpu_memory(_shell(), dry_run=dry_run).to_payload()}

    return _respond(build)


def last_oom() -> str:
    """The checklist of the last CUDA OOM in this kernel. `{"ok": true, "oom": <oom payload> | null}`."""

    def build() -> Dict[str, Any]:
        from gpumem_kernel.oom.bundle import OOM_MIME
        from gpumem_kernel.oom.handler import last_oom_bundle

        bundle = last_oom_bundle(_shell())
        return {"oom": bundle[OOM_MIME] if bundle is not None else None}

    return _respond(build)


def oom_from_text(text: str) -> str:
    """The checklist for an OOM message the handler did not see (e.g. the extension was loaded after the
    error): the IOPub error's `ename: evalue` or its traceback. `{"ok": true, "oom": <payload> | null}`,
    null when the text is not an out-of-memory message."""

    def build() -> Dict[str, Any]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        from gpumem_kernel.oom.bundle import OOM_MIME, checklist_bundle

        bundle = checklist_bundle(_ANSI.sub("", text[:_TEXT_LIMIT]), _shell())
        return {"oom": bundle[OOM_MIME] if bundle is not None else None}

    return _respond(build)


__all__ = ["clear", "last_oom", "oom_from_text"]
