"""The in-process IPython shell the handler tests share: reset, with no last error left on `sys`, and put back
after the test (our OOM handler and any custom exception handler removed), its objects collected."""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Iterator

from IPython.core.interactiveshell import InteractiveShell

from gpumem_kernel import extension
from gpumem_kernel.oom.handler import uninstall_oom_handler


def _nothing_of_ours_left(sh: InteractiveShell) -> None:
    """The shared shell as no test of ours touched it: an earlier test in this process (the order is pytest-xdist's)
    may have left the extension loaded or an OOM handler installed on it."""
    if "gpumem_kernel" in sh.extension_manager.loaded:
        sh.extension_manager.unload_extension("gpumem_kernel")
    elif extension.current() is not None:
        extension.unload(sh)
    uninstall_oom_handler(sh)


def _reset_without_collection(sh: InteractiveShell) -> None:
    """IPython's reset without the full gc.collect() it ends with (DisplayHook.flush): that walks every object torch,
    transformers and IPython made at import, about 0.27 s a reset. On entry the last test's own reset has already
    collected; the objects present are frozen for the reset (collected objects are the ones not frozen) and put back
    after. Where something else froze objects, the plain reset: thawing them is not ours to do."""
    if gc.get_freeze_count():
        sh.reset(new_session=False)
        return
    gc.freeze()
    try:
        sh.reset(new_session=False)
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def fresh_shell() -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    _nothing_of_ours_left(sh)
    _reset_without_collection(sh)
    for attr in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, attr):
            delattr(sys, attr)
    try:
        yield sh
    finally:
        uninstall_oom_handler(sh)
        sh.set_custom_exc((), None)
        sh.reset(new_session=False)
