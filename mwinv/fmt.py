"""How numbers read in mwinv's output, written once."""

from __future__ import annotations


def ms(ns: float | None, digits: int = 1, none: str = "-") -> str:
    """Nanoseconds as milliseconds, '1,234.5' (`digits` after the point); `none` where there is no value."""
    return none if ns is None else f"{ns / 1e6:,.{digits}f}"


def ms_text(ns: float) -> str:
    """Nanoseconds with their unit, '1,234.5 ms'."""
    return f"{ms(ns)} ms"


def pct(x: float) -> str:
    """A share as a whole percentage, '42%'."""
    return f"{100 * x:.0f}%"
