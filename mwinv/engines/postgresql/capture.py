"""What a capture of a PostgreSQL node needs from the server beside its kernel side (kernel.py): its
postmaster, the extension's statement drainer, the settings the advice weighs."""

from __future__ import annotations

import os
from pathlib import Path

from mwinv.capture.tables import Capture
from mwinv.errors import MwinvError

# server settings the advice reads from the manifest
RECORDED_SETTINGS = ("jit", "max_parallel_workers_per_gather", "max_parallel_workers", "work_mem", "shared_buffers",
                     "effective_io_concurrency", "random_page_cost")


def postmaster_of(data_dir: str | os.PathLike | None = None, conninfo: str | None = None) -> int:
    """The postmaster pid of a data directory (postmaster.pid) or of a server we can connect to."""
    if data_dir:
        pid = running_postmaster(Path(data_dir))
        if pid is None:
            raise MwinvError(f"{Path(data_dir) / 'postmaster.pid'}: no running server (cannot read the postmaster pid)")
        return pid
    if conninfo:
        import psycopg

        from mwinv.engines.postgresql.reader import connect_untracked

        try:
            with connect_untracked(conninfo) as conn:
                backend = conn.execute("select pg_backend_pid()").fetchone()[0]
                data = conn.execute("show data_directory").fetchone()[0]
        except psycopg.Error as exc:
            raise MwinvError(f"cannot connect ({conninfo}): {str(exc).strip().splitlines()[0]}") from None
        try:
            return postmaster_of(data_dir=data)
        except MwinvError:   # data directory not readable here: the backend's parent is the postmaster
            stat = Path(f"/proc/{backend}/stat").read_text()
            return int(stat.rsplit(")", 1)[1].split()[1])
    raise MwinvError("give the postmaster pid, a data directory or a conninfo")


def running_postmaster(data_dir: Path) -> int | None:
    """The postmaster pid in a data directory's postmaster.pid, None when it has none."""
    try:
        return int((Path(data_dir) / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def statement_drainer(conninfo: str, capture: Capture, node: str, since_ns: int | None = None):
    """The extension's drainer when the extension is there, else (None, why)."""
    import psycopg

    from mwinv.engines.postgresql import reader as mod

    try:
        with mod.connect_untracked(conninfo) as conn:   # the capture's own queries are no workload
            if not mod.extension_available(conn):
                return None, "extension mwinv not available in the server"
    except psycopg.Error as exc:
        return None, f"cannot connect: {str(exc).strip().splitlines()[0]}"
    return mod.StatementDrainer(conninfo, capture, node=node, interval_s=0.5, since_ns=since_ns), None


def server_settings(conninfo: str) -> tuple[dict, str | None]:
    """RECORDED_SETTINGS as the server has them, or ({}, why not)."""
    import psycopg

    from mwinv.engines.postgresql.reader import connect_untracked

    try:
        with connect_untracked(conninfo) as conn:
            return dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                                     [list(RECORDED_SETTINGS)]).fetchall()), None
    except psycopg.Error as exc:
        return {}, str(exc).strip().splitlines()[0]
