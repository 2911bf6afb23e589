"""The progress output of a long command (autobatch's trials, benchmark's rows, an analysis' phases and traces): one
output updated in place."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Dict, List, Optional

from IPython.display import display


class LiveOutput:
    """One output updated in place: display(..., display_id=True) on the first call, then .update().
    Nothing is shown before the first call (an argument the engine rejects leaves only its one line)."""

    def __init__(self) -> None:
        self.handle: Any = None

    def show(self, bundle: Dict[str, Any]) -> None:
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)

    def stop(self, bundle: Dict[str, Any]) -> None:
        """Replace the progress output, if there is one."""
        if self.handle is not None:
            self.handle.update(bundle, raw=True)


def progress_bundle(text: str, table: Optional[str] = None) -> Dict[str, str]:
    import html

    plain = text if table is None else f"{text}\n{table}"
    return {"text/plain": plain, "text/html": f"<pre class='gpumem-progress'>{html.escape(plain)}</pre>"}


# an analysis this quick shows no progress line: its report comes before a line would help
SHOW_AFTER_SECONDS = 2.0


def show_after() -> float:
    """SHOW_AFTER_SECONDS, or GPUMEM_PROGRESS_AFTER's seconds (0: every update; inf: never, as the tests set it,
    where a busy machine would otherwise add the line to any analysis)."""
    try:
        return float(os.environ.get("GPUMEM_PROGRESS_AFTER", SHOW_AFTER_SECONDS))
    except ValueError:
        return SHOW_AFTER_SECONDS


class AnalysisInterrupted(KeyboardInterrupt):
    """Ctrl-C during an analysis: the notebook shows its one line, not a traceback of the estimator's frames
    (IPython asks an exception for `_render_traceback_` before it formats one)."""

    def _render_traceback_(self) -> List[str]:
        return [f"KeyboardInterrupt: {self}"]


class ProgressLine:
    """A running analysis' progress (analysis.request.progress.Progress, through the request's on_progress) as one
    line updated in place, shown once the analysis has run show_after() seconds; replaced by the report when done."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.live = LiveOutput()
        self.started = time.perf_counter()
        self.last: Any = None

    def update(self, progress: Any) -> None:
        self.last = progress
        if progress.phase == "done":
            return
        if self.live.handle is None and time.perf_counter() - self.started < show_after():
            return
        # the seconds since the command began: the levers' analyses (analysis.advise) each count from their own start
        since = dataclasses.replace(progress, elapsed=time.perf_counter() - self.started)
        self.live.show(progress_bundle(f"{self.label}: {since.line()}"))

    def show(self, bundle: Dict[str, Any]) -> None:
        """The result in place of the line, or displayed when no line was shown."""
        if self.live.handle is None:
            display(bundle, raw=True)
        else:
            self.live.stop(bundle)

    def clear(self) -> None:
        """The line gone (the result is printed instead: --json)."""
        self.live.stop({"text/plain": ""})

    def interrupted(self) -> AnalysisInterrupted:
        """Ctrl-C: the line gone, and the one line the error shows: where the analysis was."""
        self.clear()
        seconds = time.perf_counter() - self.started
        where = ""
        if self.last is not None:
            traces = self.last.traces
            where = f" while {self.last.doing} ({traces} trace{'' if traces == 1 else 's'} done)"
        return AnalysisInterrupted(
            f"{self.label} stopped{where} after {seconds:.0f} s; your model and optimizer are as they were"
        )
