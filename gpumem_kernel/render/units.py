"""Human-readable byte sizes: the one byte formatter of the kernel side (console text, HTML, messages, YAML
comments). Binary units, as `torch.cuda` and PyTorch's own OOM messages print them."""

from __future__ import annotations

from typing import Optional

_FACTORS = {
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
}
_LARGEST_FIRST = ("TiB", "GiB", "MiB", "KiB")


def unit_for(n: int, unit: str = "auto") -> str:
    """The unit `format_bytes` shows `n` in: `unit` itself, or for "auto" GiB from 1 GiB and MiB below, or
    for "fit" the largest unit that keeps the number ≥ 1 (B below 1 KiB)."""
    if unit == "auto":
        return "GiB" if abs(n) >= _FACTORS["GiB"] else "MiB"
    if unit == "fit":
        return next((name for name in _LARGEST_FIRST if abs(n) >= _FACTORS[name]), "B")
    if unit not in _FACTORS:
        raise ValueError(f"unknown unit {unit!r}; use auto, fit or one of {', '.join(_FACTORS)}")
    return unit


def format_bytes(n: Optional[int], unit: str = "GiB", digits: int = 2, label: bool = True) -> str:
    """`format_bytes(2**30)` → "1.00 GiB"; None (not measured) → "n/a". `unit`: B, KiB, MiB, GiB, TiB, "auto"
    (MiB below 1 GiB) or "fit" (the largest unit that keeps the number ≥ 1); bytes have no decimals.
    `label=False` leaves the unit out, for a table column that names it once."""
    if n is None:
        return "n/a"
    name = unit_for(n, unit)
    number = str(n) if name == "B" else f"{n / _FACTORS[name]:.{digits}f}"
    return f"{number} {name}" if label else number


def human(n: Optional[int]) -> str:
    """`format_bytes(n, "fit")`: "1.50 GiB", "448.00 KiB", "512 B" (clear and the OOM checklist)."""
    return format_bytes(n, "fit")


def format_percent(part: Optional[int], whole: Optional[int]) -> str:
    """Share of `whole` as "12.3%", or "n/a" when either side is unknown or whole is 0."""
    if part is None or not whole:
        return "n/a"
    return f"{100.0 * part / whole:.1f}%"


def format_watts(watts: Optional[float]) -> str:
    """Power: "250 W" from 100 W, "8.5 W" below; None (not measured) → "n/a". NVML's milliwatts / 1000."""
    if watts is None:
        return "n/a"
    return f"{watts:.0f} W" if watts >= 100 else f"{watts:.1f} W"


def format_watt_hours(joules: Optional[float]) -> str:
    """Energy in watt-hours from joules: "1.25 kWh", "12.3 Wh", "2.50 Wh", "0.0139 Wh"; None → "n/a"."""
    if joules is None:
        return "n/a"
    wh = joules / 3600
    if wh >= 1000:
        return f"{wh / 1000:.2f} kWh"
    if wh >= 10:
        return f"{wh:.1f} Wh"
    return f"{wh:.2f} Wh" if wh >= 1 else f"{wh:.4f} Wh"


def _three_figures(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else (f"{x:.1f}" if x >= 10 else f"{x:.2f}")


def format_joules(joules: Optional[float]) -> str:
    """Energy in joules: "1.25 kJ", "250 J", "2.50 J", "12.5 mJ" (energy per sample); None → "n/a"."""
    if joules is None:
        return "n/a"
    if joules >= 1000:
        return f"{joules / 1000:.2f} kJ"
    return f"{_three_figures(joules)} J" if joules >= 1 else f"{_three_figures(joules * 1000)} mJ"
