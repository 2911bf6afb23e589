"""Human-readable byte sizes for the console and HTML renderings."""

from __future__ import annotations

from typing import Optional

_FACTORS = {
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}


def format_bytes(n: Optional[int], unit: str = "GiB", digits: int = 2) -> str:
    """`format_bytes(2**30)` → "1.00 GiB"; None (not measured) → "n/a"; unit "auto": MiB below 1 GiB."""
    if n is None:
        return "n/a"
    if unit == "auto":
        unit = "GiB" if abs(n) >= _FACTORS["GiB"] else "MiB"
    try:
        factor = _FACTORS[unit]
    except KeyError:
        raise ValueError(f"unknown unit {unit!r}; use auto or one of {', '.join(_FACTORS)}") from None
    if unit == "B":
        return f"{n} B"
    return f"{n / factor:.{digits}f} {unit}"


def format_percent(part: Optional[int], whole: Optional[int]) -> str:
    """Share of `whole` as "12.3%", or "n/a" when either side is unknown or whole is 0."""
    if part is None or not whole:
        return "n/a"
    return f"{100.0 * part / whole:.1f}%"
