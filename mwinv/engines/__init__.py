"""What mwinv knows of each DBMS engine, one package per engine: how to read its statements (and
its own wait events, where it has them) into the capture tables, and what a node capture asks of it
(Engine: its processes' roles, its USDT probes, how to find its server, its statement reader, its
settings), which the node capture, the recorder and the trace parser take as configuration. Each
package registers what it supplies once (`ENGINE`, a registry.Registration in its __init__). The code
that runs inside a DBMS (the PostgreSQL extension) lives apart, under `dbplugins/`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mwinv.kernel_trace.usdt import ProbeSet


@dataclass(frozen=True)
class Engine:
    """What a node capture (mwinv/node_capture.py) asks of a DBMS engine.

    role(cmdline, parent_cmdline): a process's role from its command line (and its parent's: a child read
    before it set its own title); probes(statements): the USDT probe sets to attach for a statement source
    ("extension", "usdt" or None); server_pid(conninfo): the server's root process; server_pid_of(data_dir):
    the root process of a data directory's server, None when none runs (a restart is followed through
    it); statement_reader(
    conninfo, capture, node, since_ns): a started-on-demand reader of its statements, or (None, why);
    settings(conninfo): the settings the advice weighs, or ({}, why); statements_from_probes(capture,
    node): statements made from the probes' events when there is no reader (their source and what they
    lack in probe_source, probe_lost)."""
    name: str
    role: Callable[[str, str], str | None]
    probes: Callable[[str | None], tuple[ProbeSet, ...]]
    server_pid: Callable[[str], int] | None = None
    server_pid_of: Callable[[Path], int | None] | None = None
    statement_reader: Callable | None = None
    settings: Callable[[str], tuple[dict, str | None]] | None = None
    statements_from_probes: Callable | None = None
    probe_source: str = ""
    probe_lost: str = ""
