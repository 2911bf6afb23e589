"""A training step that raised something other than running out of memory, in autobatch's trials and the
benchmark's configurations (both run the user's forward, loss, batches and optimizer for real).

The one line names the exception's type as the step raised it ("a training step failed: ValueError: ..."), as
analyze's traced step does; the exception itself is the `__cause__`, so its traceback (the user's code) is still
there to read. No torch import: the magics catch it.
"""

from __future__ import annotations


class StepError(RuntimeError):
    """A training step raised `error` (its `__cause__` too)."""

    def __init__(self, error: BaseException) -> None:
        text = str(error).strip()
        said = f": {text.splitlines()[0][:300]}" if text else ""
        super().__init__(f"a training step failed: {type(error).__name__}{said}")
        self.error = error
