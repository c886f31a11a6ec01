"""How numbers read in mwinv's output, written once."""

from __future__ import annotations

# The two times of a statement (docs/attribution.md), said where a share of one is printed: the top
# lists' totals and breakdowns are of the wall time, the classes' and the advice's shares of the other.
WALL = "wall: the statements' windows, client waits included; the shares are of it"
IN_DB = "shares are of the time in the database: the wall time less client waits"


def ms(ns: float | None, digits: int = 1, none: str = "-") -> str:
    """Nanoseconds as milliseconds, '1,234.5' (`digits` after the point); `none` where there is no value."""
    return none if ns is None else f"{ns / 1e6:,.{digits}f}"


def duration(ns: float | None, sign: bool = False, none: str = "-") -> str:
    """A duration with its unit, as precise as it is short: '1,234.5 ms', '412.3 µs', '850 ns' (an OLTP
    statement of 120 µs read '0.1 ms', its change '+0.0 ms'); sign: '+' on a positive one (a change)."""
    if ns is None:
        return none
    plus = "+" if sign else ""
    size = abs(ns)
    if size >= 999_950 or size == 0:    # what would round to 1,000.0 µs is 1.0 ms
        return f"{ns / 1e6:{plus},.1f} ms"
    if size >= 999.5:
        return f"{ns / 1e3:{plus}.1f} µs"
    return f"{ns:{plus}.0f} ns"


def pct(x: float) -> str:
    """A share as a whole percentage, '42%'."""
    return f"{100 * x:.0f}%"
