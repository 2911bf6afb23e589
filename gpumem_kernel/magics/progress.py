"""The progress output of a long command (autobatch's trials, benchmark's rows): one output updated in place."""

from __future__ import annotations

from typing import Any, Dict, Optional

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
