"""What mwinv knows of each DBMS engine, one package per engine: how to read its statements (and
its own wait events, where it has them) into the capture tables, and its kernel side (KernelSide:
its processes' roles and its USDT probes), which the recorder and the trace parser take as
configuration. The code that runs inside a DBMS (the PostgreSQL extension) lives apart, under
`dbplugins/`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mwinv.kernel_trace.usdt import ProbeSet


@dataclass(frozen=True)
class KernelSide:
    """An engine's kernel side. role(cmdline, parent_cmdline): a process's role from its command line (and
    its parent's: a child read before it set its own title); probes(statements): the USDT probe sets to
    attach for a statement source ("extension", "usdt" or None)."""
    name: str
    role: Callable[[str, str], str | None]
    probes: Callable[[str | None], tuple[ProbeSet, ...]]
