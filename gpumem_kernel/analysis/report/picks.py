"""Batch-size picks: the shares of the maximum they aim at, how they are rounded, and the captions that say
what share of the maximum a pick really is.

A pick (the analysis' recommended and safe batches, autobatch's recommended batch) is an aim (60 % of the
maximum, the maximum less a margin) rounded down: to a power of two by default, as the guides do, to a
multiple of N (`--round 8`), or only to a whole batch (`--round none`). The rounding comes from the command's
`--round`, else from the JupyterLab setting "Batch-size rounding" (the browser sends it to the kernel with a
`configure` request), else the default. Payloads say which rounding was used and where it came from.

Captions compute their percentage from the two numbers they show, rounded half up like the browser's
(src/outputs/picks.ts), so "256 — 50 % of the maximum 507" reads the same in text, HTML and the view.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional, Tuple


POW2, NONE = "pow2", "none"
SOURCES = ("option", "setting", "default")  # the command's --round | the JupyterLab setting | neither
SOURCE_WORDS = {"option": "--round", "setting": "JupyterLab setting", "default": "default"}
_POW2_WORDS = {"pow2", "power-of-two", "power of two", "power-of-2", "2^n", "2**n"}
_NONE_WORDS = {"none", "off", "exact", "no"}
_DIGITS = re.compile(r"[0-9]+\Z")
MAX_MULTIPLE = 1 << 20
RECOMMENDED_SHARE, SAFE_SHARE = 0.6, 0.4  # the analysis guide's picks, as shares of the maximum (before rounding)


@dataclass(frozen=True)
class Rounding:
    """Round down to a power of two (`multiple` None, `exact` False), to a multiple of `multiple`, or to a
    whole batch (`exact`)."""

    multiple: Optional[int] = None
    exact: bool = False

    @property
    def code(self) -> str:
        """The value `--round` takes for this rounding: pow2 | none | N."""
        if self.exact:
            return NONE
        return POW2 if self.multiple is None else str(self.multiple)

    @property
    def label(self) -> str:
        """The payloads' `rounding`: "power of two", "multiple of 8" or "none"."""
        if self.exact:
            return "none"
        return "power of two" if self.multiple is None else f"multiple of {self.multiple}"

    def apply(self, value: float) -> int:
        """`value` rounded down; 0 below 1. A multiple of N keeps values below N as they are (a batch of 5
        is better than none)."""
        v = int(math.floor(value))
        if v < 1:
            return 0
        if self.exact:
            return v
        if self.multiple is not None:
            return v if v < self.multiple else (v // self.multiple) * self.multiple
        return 1 << (v.bit_length() - 1)

    def step_below(self, pick: int) -> int:
        """The next pick below `pick` under this rounding (to keep two picks apart that rounding merged)."""
        if self.exact:
            return pick - 1
        if self.multiple is not None and pick > self.multiple:
            return pick - self.multiple
        return pick - pick // 2


DEFAULT = Rounding()


def picks_below(maximum: Optional[int], rounding: Rounding) -> Tuple[Optional[int], Optional[int]]:
    """(recommended, safe) below `maximum`: RECOMMENDED_SHARE and SAFE_SHARE of it, rounded down, at least 1, and
    kept apart where rounding merged them; (None, None) without a maximum. The batch picks and the sequence-length
    picks (analysis.search.max_sequence) alike."""
    if maximum is None or maximum < 1:
        return None, None
    recommended = max(1, rounding.apply(RECOMMENDED_SHARE * maximum))
    safe = max(1, rounding.apply(SAFE_SHARE * maximum))
    if safe == recommended and recommended > 1:
        safe = rounding.step_below(recommended)
    return recommended, safe


def parse_rounding(value: Any) -> Rounding:
    """pow2 | none | N (a multiple of N; 1 is the same as none), as a string or an int; ValueError otherwise."""
    if isinstance(value, Rounding):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value.strip().lower()
    else:
        raise ValueError(f"rounding must be pow2, none or a whole number N (a multiple of N), got {value!r}")
    if text in _POW2_WORDS:
        return DEFAULT
    if text in _NONE_WORDS:
        return Rounding(exact=True)
    # the length first: int() of 4300+ digits raises Python's own limit text instead of this message
    if _DIGITS.match(text) and len(text.lstrip("0")) <= len(str(MAX_MULTIPLE)) and 1 <= int(text) <= MAX_MULTIPLE:
        n = int(text)
        return Rounding(exact=True) if n == 1 else Rounding(multiple=n)
    shown = value if len(str(value)) <= 40 else str(value)[:40] + "…"
    raise ValueError(f"unknown rounding {shown!r}: use pow2 (the default), none, or N for a multiple of N (e.g. 8)")


def from_options(rounding: Any, multiple: Optional[int]) -> Optional[Rounding]:
    """The rounding a call asked for with `rounding=` or the older `multiple=N`; None when it asked for none.
    Both given and different: ValueError."""
    asked = None if rounding is None else parse_rounding(rounding)
    if multiple is not None:
        by_multiple = parse_rounding(multiple)
        if asked is not None and asked != by_multiple:
            raise ValueError(f"multiple={multiple} and rounding={asked.code!r} disagree: give one of them")
        asked = by_multiple
    return asked


# --- where the rounding comes from ---------------------------------------------------------------------------


def resolve(asked: Optional[Rounding], setting: Any = None) -> Tuple[Rounding, str]:
    """(the rounding to use, where it came from: option | setting | default): the call's, else the JupyterLab
    setting "Batch-size rounding" the caller passes on (the browser sends it with `configure`), else pow2."""
    if asked is not None:
        return asked, "option"
    return (parse_rounding(setting), "setting") if setting is not None else (DEFAULT, "default")


# --- captions ---------------------------------------------------------------------------------------------------


def percent(part: float, whole: float) -> int:
    """100 · part / whole rounded half up (the browser's Math.round), for captions."""
    return int(math.floor(100 * part / whole + 0.5))


def share_caption(pick: int, maximum: int, aim: float, rounding_label: str) -> str:
    """ "50% of the maximum 507; aim 60%, rounded down to a power of two": the share computed from the two
    numbers, then the rule that made the pick."""
    return f"{percent(pick, maximum)}% of the maximum {maximum}; aim {percent(aim, 1)}%, {rule(rounding_label)}"


def below_caption(pick: int, maximum: int, margin: float, rounding_label: str) -> str:
    """ "38% below the maximum 26; margin 10%, rounded down to a power of two"."""
    below = percent(maximum - pick, maximum)
    return f"{below}% below the maximum {maximum}; margin {percent(margin, 1)}%, {rule(rounding_label)}"


def rule(label: str) -> str:
    """The rule of a payload's `rounding` label (labels written by any version of the kernel)."""
    return "rounded down to a whole batch" if label == "none" else f"rounded down to a {label}"


def rounding_text(label: str, source: Optional[str]) -> str:
    """ "power of two (default)", "multiple of 8 (JupyterLab setting)", "none (--round)"; the label alone
    for a payload written before it said where the rounding came from."""
    return f"{label} ({SOURCE_WORDS[source]})" if source in SOURCE_WORDS else label
