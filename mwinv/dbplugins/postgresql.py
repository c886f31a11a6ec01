"""Reader of the PostgreSQL extension `mwinv` (dbplugins/postgresql/): drains its shared-memory
ring of per-execution statement records into the capture tables `statement` and
`statement_text` (one text per query id per capture).

    drain(conn, capture)                       what is in the ring now -> rows written
    StatementDrainer(conninfo, capture).start() ... .stop()   periodic drain during a capture
"""

from __future__ import annotations

import hashlib
import threading
import time

import psycopg

from mwinv.capture.tables import Capture, node_name
from mwinv.errors import MwinvError

DBMS = "postgresql"
DRAIN_BATCH = 50_000

# mwinv_drain() columns copied unchanged into the `statement` table
_RECORD_COLUMNS = (
    "statement_id", "parent_statement_id", "query_id", "pid", "leader_pid", "database", "username",
    "start_ns", "end_ns", "start_wall_ns", "plan_ns", "cpu_user_ns", "cpu_sys_ns", "read_bytes",
    "write_bytes", "minflt", "majflt", "inblock", "oublock", "nvcsw", "nivcsw", "rows", "nesting_level",
    "errored",
)
_DRAIN_SQL = f"SELECT {', '.join(_RECORD_COLUMNS)} FROM mwinv_drain(%s)"


def text_hash(text: str) -> int:
    """A stable signed 64-bit hash of a query text (the `query_text_hash` key)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)


def extension_available(conn: psycopg.Connection) -> bool:
    """True when mwinv is preloaded in this server and its SQL objects exist (created here if the
    extension is installed but not yet created in this database and we may create it)."""
    try:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'mwinv'").fetchone() is None:
            if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'mwinv'").fetchone() is None:
                return False
            conn.execute("CREATE EXTENSION IF NOT EXISTS mwinv")
        # fails with "must be loaded via shared_preload_libraries" when it is not preloaded
        conn.execute("SELECT * FROM mwinv_info()").fetchone()
        return True
    except psycopg.Error:
        if not conn.autocommit:
            conn.rollback()
        return False


def _server_node(conn: psycopg.Connection) -> str:
    name = conn.execute("SELECT current_setting('mwinv.node_name', true)").fetchone()[0]
    return name or node_name()


def connect_untracked(conninfo: str) -> psycopg.Connection:
    """A connection whose own statements stay out of the ring (they are no workload); set at
    connection start so that not even the first statement is recorded.  Falls back to a plain
    connection for roles that may not change mwinv.track."""
    try:
        return psycopg.connect(conninfo, autocommit=True, options="-c mwinv.track=none")
    except psycopg.OperationalError as exc:
        if "permission denied" not in str(exc):
            raise
        return psycopg.connect(conninfo, autocommit=True)


class _Reader:
    """Fetches records and the texts of query ids this capture does not have yet."""

    def __init__(self, conn: psycopg.Connection, capture: Capture, node: str | None):
        self.conn = conn
        self.capture = capture
        self.node = node or _server_node(conn)
        self.hashes: dict[int, int | None] = {}
        if capture.has("statement_text"):
            t = capture.read("statement_text")
            self.hashes = dict(zip(t.column("query_id").to_pylist(), t.column("query_text_hash").to_pylist()))

    def fetch(self) -> tuple[list[dict], list[dict]]:
        records: list[dict] = []
        while True:
            batch = self.conn.execute(_DRAIN_SQL, (DRAIN_BATCH,)).fetchall()
            records.extend(dict(zip(_RECORD_COLUMNS, row)) for row in batch)
            if len(batch) < DRAIN_BATCH:
                break
        new_ids = {r["query_id"] for r in records if r["query_id"] is not None} - self.hashes.keys()
        texts = []
        if new_ids:
            for query_id, text in self.conn.execute(
                "SELECT query_id, query FROM mwinv_texts WHERE query_id = ANY(%s) AND query IS NOT NULL",
                (list(new_ids),),
            ):
                h = text_hash(text)
                self.hashes[query_id] = h
                texts.append({"query_text_hash": h, "query_id": query_id, "text": text})
        for r in records:
            r["node"] = self.node
            r["dbms"] = DBMS
            r["query_text_hash"] = self.hashes.get(r["query_id"])
        return records, texts

    def write(self, records: list[dict], texts: list[dict]) -> int:
        if texts:
            self.capture.write_part("statement_text", texts, node=self.node)
        if records:
            self.capture.write_part("statement", records, node=self.node)
        return len(records)


def drain(conn: psycopg.Connection, capture: Capture, node: str | None = None) -> int:
    """Take every record now in the ring and write it to `capture`; returns the rows written.
    `node` defaults to the server's mwinv.node_name, else this host's node name."""
    try:
        reader = _Reader(conn, capture, node)
        return reader.write(*reader.fetch())
    except psycopg.errors.UndefinedFunction:
        raise MwinvError("extension mwinv is not created in this database (CREATE EXTENSION mwinv)") from None
    except psycopg.errors.ObjectNotInPrerequisiteState as exc:
        raise MwinvError(f"mwinv: {exc.diag.message_primary}") from None


class StatementDrainer:
    """Drains the ring every `interval_s` in a thread while a capture runs; writes a part at most
    every `flush_s` (fewer, larger Parquet parts) and everything at stop()."""

    def __init__(self, conninfo: str, capture: Capture, node: str | None = None, interval_s: float = 0.5,
                 flush_s: float = 5.0):
        self.conninfo = conninfo
        self.capture = capture
        self.node = node
        self.interval_s = interval_s
        self.flush_s = flush_s
        self.rows_written = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._conn: psycopg.Connection | None = None
        self._reader: _Reader | None = None

    def start(self) -> "StatementDrainer":
        self._conn = connect_untracked(self.conninfo)
        if not extension_available(self._conn):
            self._conn.close()
            raise MwinvError("mwinv is not in shared_preload_libraries of the server or not installed")
        self._reader = _Reader(self._conn, self.capture, self.node)
        self._thread = threading.Thread(target=self._run, name="mwinv-statement-drainer", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        records: list[dict] = []
        texts: list[dict] = []
        last_flush = time.monotonic()
        try:
            while not self._stop.wait(self.interval_s):
                r, t = self._reader.fetch()
                records += r
                texts += t
                if time.monotonic() - last_flush >= self.flush_s:
                    self.rows_written += self._reader.write(records, texts)
                    records, texts, last_flush = [], [], time.monotonic()
        except BaseException as exc:  # reported by stop()
            self._error = exc
        finally:
            # what was fetched is never lost, also when the loop failed
            self.rows_written += self._reader.write(records, texts)

    def stop(self) -> int:
        """Stop the thread, drain one last time; returns all rows written by this drainer."""
        if self._thread is None:
            return self.rows_written
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            if self._error is None:
                self.rows_written += self._reader.write(*self._reader.fetch())
        finally:
            self._conn.close()
        if self._error is not None:
            raise MwinvError(f"mwinv statement drainer failed: {self._error}") from self._error
        return self.rows_written

    def __enter__(self) -> "StatementDrainer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
