"""Looking at the user's objects without trusting them.

A value whose `__class__` raises (a dead weakref.proxy, a class whose `__getattribute__` raises) breaks isinstance,
which asks `__class__`; one whose `__class__` lies (a Mock given a spec, a proxy claiming what it wraps) makes
isinstance answer for something else. So the walk decides what a value is by `type(value)`, which no class can
override, and the one loop over the user's variables (heldby.walk, which the holders, the clear, the OOM
checklist and the growth notice all read them by) asks `problem()` first and skips a value that raises, and runs
each variable's work under `Skipped.guard`: one odd object costs its own entry, never the feature.
`Skipped.line()` then names the skipped variables once.

Only the object's own faults are caught: KeyboardInterrupt and SystemExit always go through.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, Optional, Tuple, Type

# A request to stop, never the object's fault.
STOPS: Tuple[Type[BaseException], ...] = (KeyboardInterrupt, SystemExit)
# Weak references hold nothing alive, and a live one answers for the object it points to.
PROXIES: Tuple[type, ...] = (weakref.ProxyType, weakref.CallableProxyType)
_NAMES_SHOWN = 8  # the line names this many variables, then counts the rest
_NAME_LIMIT = 40  # namespace keys are any strings: globals()["x" * 10**6] must not become the line


def is_fault(error: BaseException) -> bool:
    """Whether `error`, raised while looking at a user's object, is the object's fault (skip the object) rather
    than a request to stop (re-raise it)."""
    return not isinstance(error, STOPS)


def type_name(cls: type) -> str:
    """A class's own name, read without its metaclass's attribute hooks."""
    return str(type.__dict__["__name__"].__get__(cls, type))


def problem(value: Any) -> Optional[str]:
    """Why `value` cannot be inspected, or None when it can: the name of the exception reading its `__class__`
    raised (a dead weakref.proxy: ReferenceError; a `__getattribute__` that raises). A `__class__` that lies (a
    proxy claiming what it wraps, a Mock given a spec) is no reason: the walks go by `type(value)` and read its
    own attributes, so it is looked at as what it is, never as what it claims."""
    try:
        _ = value.__class__  # the read is the check: it runs the object's own attribute hooks
    except BaseException as error:
        if not is_fault(error):
            raise
        return type_name(type(error))
    return None


def _shown_name(name: str) -> str:
    return name if len(name) <= _NAME_LIMIT else name[: _NAME_LIMIT - 1] + "…"


@dataclass
class Skipped:
    """The variables one feature's walks could not inspect, by name (the first reason found for each), for one
    line at the end however many walks the feature made."""

    reasons: Dict[str, str] = field(default_factory=dict)

    def add(self, name: str, reason: str) -> None:
        self.reasons.setdefault(name, reason)

    def accepts(self, name: str, value: Any) -> bool:
        """True when `value` can be inspected; else False, and `name` is recorded with the reason."""
        reason = problem(value)
        if reason is None:
            return True
        self.add(name, reason)
        return False

    @contextlib.contextmanager
    def guard(self, name: str, passes: Tuple[Type[BaseException], ...] = ()) -> Iterator[None]:
        """Run one variable's inspection: what it raises (but `passes` and STOPS) records `name` and ends only
        that variable's part."""
        try:
            yield
        except passes:
            raise
        except BaseException as error:
            if not is_fault(error):
                raise
            self.add(name, type_name(type(error)))

    def line(self) -> Optional[str]:
        """`skipped 2 variables that could not be inspected: p (ReferenceError), h (RuntimeError)`, or None."""
        if not self.reasons:
            return None
        count = len(self.reasons)
        named = [f"{_shown_name(name)} ({reason})" for name, reason in list(self.reasons.items())[:_NAMES_SHOWN]]
        more = f" and {count - _NAMES_SHOWN} more" if count > _NAMES_SHOWN else ""
        noun = "variable" if count == 1 else "variables"
        return f"skipped {count} {noun} that could not be inspected: {', '.join(named)}{more}"
