"""A session hook for Oracle (python-oracledb, thin mode: no Oracle client libraries): switch the
extended SQL trace on for a session, a service/module, or the caller's own session
(DBMS_MONITOR), find the trace file (V$DIAG_INFO, V$PROCESS), fetch it where it is not on a local
disk (V$DIAG_TRACE_FILE_CONTENTS, 12.2+), and switch the trace off again on exit, Ctrl-C and
SIGTERM (the CLI turns SIGTERM into KeyboardInterrupt).

UNVERIFIED against a server: no Oracle server can run where mwinv is tested. The statements below
follow Oracle's documentation of DBMS_MONITOR and the V$ views; only the failure paths (no
listener, bad credentials) are tested."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from mwinv import privfile
from mwinv.errors import MwinvError

ENABLE_SESSION = ("BEGIN DBMS_MONITOR.SESSION_TRACE_ENABLE(session_id => :sid, serial_num => :serial, "
                  "waits => TRUE, binds => :binds, plan_stat => 'ALL_EXECUTIONS'); END;")
DISABLE_SESSION = "BEGIN DBMS_MONITOR.SESSION_TRACE_DISABLE(session_id => :sid, serial_num => :serial); END;"
ENABLE_MODULE = ("BEGIN DBMS_MONITOR.SERV_MOD_ACT_TRACE_ENABLE(service_name => :service, module_name => :module, "
                 "waits => TRUE, binds => :binds, plan_stat => 'ALL_EXECUTIONS'); END;")
DISABLE_MODULE = ("BEGIN DBMS_MONITOR.SERV_MOD_ACT_TRACE_DISABLE(service_name => :service, "
                  "module_name => :module); END;")
OWN_SESSION = "SELECT sid, serial# FROM v$session WHERE sid = sys_context('userenv', 'sid')"
TRACE_FILE_OF = """
    SELECT p.tracefile, p.spid FROM v$session s JOIN v$process p ON p.addr = s.paddr
    WHERE s.sid = :sid AND s.serial# = :serial"""
TRACE_CONTENTS = """
    SELECT payload FROM v$diag_trace_file_contents WHERE trace_filename = :name ORDER BY line_number"""


@dataclass
class Traced:
    sid: int | None
    serial: int | None
    trace_file: str | None     # the server's path of the trace file
    spid: str | None           # the server process's OS pid (its thread id under threaded_execution)


def connect(dsn: str, user: str, password: str):
    try:
        import oracledb
    except ImportError:
        raise MwinvError("python-oracledb is not installed (pip install 'mwinv[oracle]')") from None
    try:
        return oracledb.connect(user=user, password=password, dsn=dsn)
    except oracledb.Error as exc:
        raise MwinvError(f"{dsn}: cannot connect ({str(exc).splitlines()[0]})") from None


@contextlib.contextmanager
def traced_session(conn, sid: int | None = None, serial: int | None = None, binds: bool = True) -> Iterator[Traced]:
    """Trace session (sid, serial), or the connection's own session when sid is None, until the block
    ends however it ends."""
    cur = conn.cursor()
    if sid is None:
        sid, serial = cur.execute(OWN_SESSION).fetchone()
    cur.execute(ENABLE_SESSION, sid=sid, serial=serial, binds=binds)
    try:
        row = cur.execute(TRACE_FILE_OF, sid=sid, serial=serial).fetchone()
        yield Traced(sid, serial, row[0] if row else None, str(row[1]) if row else None)
    finally:
        cur.execute(DISABLE_SESSION, sid=sid, serial=serial)


@contextlib.contextmanager
def traced_module(conn, service: str, module: str, binds: bool = True) -> Iterator[Traced]:
    """Trace every session of a service and module (their files are found per session afterwards)."""
    cur = conn.cursor()
    cur.execute(ENABLE_MODULE, service=service, module=module, binds=binds)
    try:
        yield Traced(None, None, None, None)
    finally:
        cur.execute(DISABLE_MODULE, service=service, module=module)


def fetch_trace(conn, trace_file: str, out: str | Path) -> Path:
    """The trace file's lines from the server (V$DIAG_TRACE_FILE_CONTENTS) into `out`."""
    name = trace_file.rsplit("/", 1)[-1]
    out = Path(out)
    cur = conn.cursor()
    cur.arraysize = 10_000
    n = 0
    with privfile.replacing(out, binary=False) as f:
        for (payload,) in cur.execute(TRACE_CONTENTS, name=name):
            f.write(payload if payload.endswith("\n") else payload + "\n")
            n += 1
        if n == 0:
            raise MwinvError(f"{trace_file}: V$DIAG_TRACE_FILE_CONTENTS has no lines of it "
                             "(not yet written, or purged)")
    return out
