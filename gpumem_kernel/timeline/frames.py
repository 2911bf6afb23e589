"""Frames: whose code a frame is (the user's, or torch's / a library's / Python's / ours / IPython's), and a cheap
capture of the current Python stack. Which notebook cell a cell's file name is (its execution count, shown as
"In [N], line L") is probe/cells.py's `cell_of`, read where a frame is written out (payload, export, capture).

The user's code is everything that is not under an installed library's folder (site-packages,
dist-packages, the folders of torch, IPython, ipykernel and other modules already imported from elsewhere),
not Python's standard library, not gpumem_kernel, and not code Python generated (`<string>`, `<frozen …>`);
a notebook cell (`/tmp/ipykernel_<pid>/<hash>.py`, `<ipython-input-N-…>`) is the user's.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

from gpumem_kernel.timeline.history import RawFrame

MAX_FRAMES = 64  # as the timeline schema's stack.frames

# Modules whose folders are never the user's code even where they are not installed in site-packages
# (an editable install, a source checkout).
_LIBRARY_MODULES = ("torch", "IPython", "ipykernel", "traitlets", "tornado", "zmq", "jupyter_client", "pytest")
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gpumem_kernel/


def _folder(path: str) -> str:
    return os.path.join(os.path.normcase(os.path.abspath(path)), "")


@functools.lru_cache(maxsize=None)
def _static_roots() -> Tuple[str, ...]:
    """Python's own and the installed libraries' folders (they do not change while the kernel runs)."""
    import site

    roots = {_folder(_PACKAGE_DIR)}
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            roots.add(_folder(paths[key]))
    try:
        roots.update(_folder(p) for p in site.getsitepackages())
    except AttributeError:  # virtualenv's old site.py
        pass
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        roots.add(_folder(user_site))
    return tuple(sorted(roots, key=len, reverse=True))


def _module_roots(loaded: FrozenSet[str]) -> Tuple[str, ...]:
    return _module_roots_cached(loaded)


@functools.lru_cache(maxsize=16)
def _module_roots_cached(loaded: FrozenSet[str]) -> Tuple[str, ...]:
    roots = []
    for name in loaded:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            roots.append(_folder(os.path.dirname(path)))
    return tuple(roots)


@functools.lru_cache(maxsize=4096)
def _is_user_file(filename: str, module_roots: Tuple[str, ...]) -> bool:
    if filename.startswith("<"):
        return filename.startswith(("<ipython-input-", "<stdin>", "<console>"))
    path = os.path.normcase(os.path.abspath(filename))
    parts = path.replace("\\", "/").split("/")
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return not any(path.startswith(root) for root in _static_roots() + module_roots)


def is_user_frame(filename: str) -> bool:
    """True when `filename` is the user's own code (see the module's docstring)."""
    loaded = frozenset(name for name in _LIBRARY_MODULES if name in sys.modules)
    return _is_user_file(filename, _module_roots(loaded))


# --- capture ------------------------------------------------------------------------------------------------

# (id(code), line) -> (code, frame). Keyed by id: a code object's own hash reads its whole bytecode each time; the
# code is kept in the entry, so its id is not reused while the entry lives.
_FRAME_CACHE: Dict[Tuple[int, int], Tuple[Any, RawFrame]] = {}


def _raw(code: Any, line: int) -> RawFrame:
    entry = _FRAME_CACHE.get((id(code), line))
    if entry is None or entry[0] is not code:
        if len(_FRAME_CACHE) > 200_000:
            _FRAME_CACHE.clear()
        entry = _FRAME_CACHE[(id(code), line)] = (code, RawFrame(code.co_filename, line, code.co_name))
    return entry[1]


def capture_stack(skip: int = 1, limit: int = MAX_FRAMES, stop: Optional[Any] = None) -> Tuple[RawFrame, ...]:
    """The current Python stack, innermost first, at most `limit` frames, leaving out the `skip` innermost
    (1: this function's caller). `stop`: a code object; the walk ends before the frame running it, and an
    empty stack is returned when no frame runs it (the caller was not inside that function)."""
    frame = sys._getframe(skip)
    frames = []
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        if code is stop:
            return tuple(frames)
        frames.append(_raw(code, frame.f_lineno or 0))
        frame = frame.f_back
    if stop is not None:
        while frame is not None:  # past the limit: still inside `stop`?
            if frame.f_code is stop:
                return tuple(frames)
            frame = frame.f_back
        return ()
    return tuple(frames)


def stack_capturer(stop: Optional[Any] = None, skip: int = 2) -> Callable[[], Tuple[RawFrame, ...]]:
    """A no-argument function that captures the stack of whoever calls it, innermost first (`skip` frames of
    the hook machinery left out), up to the frame running `stop`."""

    def capture() -> Tuple[RawFrame, ...]:
        return capture_stack(skip=skip + 1, stop=stop)

    return capture


def source_index(frames: Tuple[RawFrame, ...]) -> Optional[int]:
    """Index of the innermost user frame: the line that allocated it; None when no frame is the user's."""
    for index, frame in enumerate(frames):
        if is_user_frame(frame.file):
            return index
    return None
