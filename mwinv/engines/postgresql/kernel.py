"""PostgreSQL as a node capture sees it: the USDT probes the recorder attaches (the mwinv extension's
statement probes, PostgreSQL's own query and lock-wait probes), the role of each of its processes,
and (from capture.py and probes.py) its postmaster, the extension's statement drainer, its settings
and the statements made from its own probes. The node capture, the recorder and the trace parser
know no DBMS: an engine hands them this (mwinv/engines/__init__.py)."""

from __future__ import annotations

from mwinv.engines import Engine
from mwinv.engines.postgresql import probes as probe_statements
from mwinv.engines.postgresql.capture import (postmaster_of, running_postmaster, server_settings,
                                              statement_drainer)
from mwinv.kernel_trace.usdt import ProbeSet

# the extension's probes (dbplugins/postgresql/): a statement's start and end with its ids, in mwinv.so
# beside the server's other libraries (<prefix>/bin/postgres, <prefix>/lib/mwinv.so: Debian's layout and
# a source build's)
STATEMENT_PROBES = ProbeSet("mwinv_stmt", "mwinv", {"statement__start": "mwinv_stmt_start",
                                                    "statement__done": "mwinv_stmt_done"},
                            library="lib/mwinv.so", args=("statement_id", "query_id"), per_site=False)
# PostgreSQL's own statement probes (no query id): a Query message's start (with its text) and done;
# for the extended protocol the parse of a statement (with its text) and the run of a portal.
QUERY_PROBES = ProbeSet("pg_query", "postgresql", {
    "query__start": "pg_query_start", "query__done": "pg_query_done", "query__parse__start": "pg_query_parse",
    "query__execute__start": "pg_query_exec_start", "query__execute__done": "pg_query_exec_done"},
    text_events=("pg_query_start", "pg_query_parse"))
# PostgreSQL's own lock-wait probes: the only kernel-visible sign that a latch wait is a lock wait
# (heavyweight lock waits sleep in epoll_wait like pg_sleep does). They fire only on waits.
LOCK_PROBES = ProbeSet("pg_lock_wait", "postgresql", {
    "lock__wait__start": "pg_lock_wait_start", "lock__wait__done": "pg_lock_wait_done",
    "lwlock__wait__start": "pg_lwlock_wait_start", "lwlock__wait__done": "pg_lwlock_wait_done"})

BACKGROUND_ROLES = ("checkpointer", "background writer", "walwriter", "autovacuum launcher", "autovacuum worker",
                    "logical replication launcher", "stats collector", "archiver", "startup", "walsender",
                    "walreceiver")


def title_role(cmdline: str) -> str:
    """The role of a PostgreSQL process from its process title."""
    if not cmdline.startswith("postgres:"):
        return "postmaster" if "postgres" in cmdline.split(" ")[0] else "other"
    title = cmdline[len("postgres:"):].strip()
    if title.startswith("parallel worker"):
        return "parallel worker"
    for name in BACKGROUND_ROLES:
        if title.startswith(name):
            return name
    return "backend"


def role(cmdline: str, parent_cmdline: str = "") -> str | None:
    """A process's role; a child seen only before it set its process title (the postmaster's command line),
    or not read at all (forked and gone between two 50 ms polls of /proc), is a connection's backend: the
    server's other processes start with it, so one forked during a capture is a backend."""
    own = title_role(cmdline) if cmdline else None
    if (own == "postmaster" and parent_cmdline == cmdline) or \
            (own is None and parent_cmdline and title_role(parent_cmdline) == "postmaster"):
        return "backend"
    return own


def probes(statements: str | None) -> tuple[ProbeSet, ...]:
    """What to attach: statements "extension" (its probes, when mwinv.so is installed), "usdt" (PostgreSQL's
    own query probes: statements without the extension) or None; the lock-wait probes always."""
    chosen = {"extension": (STATEMENT_PROBES,), "usdt": (QUERY_PROBES,), None: ()}[statements]
    return chosen + (LOCK_PROBES,)


POSTGRESQL = Engine("postgresql", role=role, probes=probes,
                    server_pid=lambda conninfo: postmaster_of(conninfo=conninfo),
                    server_pid_of=running_postmaster,
                    statement_reader=statement_drainer, settings=server_settings,
                    statements_from_probes=probe_statements.statements_from_probes,
                    probe_source=probe_statements.SOURCE, probe_lost=probe_statements.LOST)
