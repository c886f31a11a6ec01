"""Reader of the PostgreSQL extension `mwinv` (dbplugins/postgresql/): drains its shared-memory
ring of per-execution statement records into the capture tables `statement` and
`statement_text` (one text per query id per capture).

    drain(conn, capture)                       what is in the ring now -> rows written
    StatementDrainer(conninfo, capture).start() ... .stop()   periodic drain during a capture
"""

from __future__ import annotations

import hashlib
import io
import threading
import time

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from mwinv.capture.columns import empty_table
from mwinv.capture.tables import SCHEMAS, Capture, node_name
from mwinv.errors import MwinvError

DBMS = "postgresql"
DRAIN_BATCH = 50_000

# mwinv_drain() columns copied unchanged into the `statement` table
_RECORD_COLUMNS = (
    "statement_id", "parent_statement_id", "query_id", "pid", "leader_pid", "database", "username",
    "start_ns", "end_ns", "start_wall_ns", "plan_ns", "parse_ns", "client_wait_ns", "cpu_user_ns", "cpu_sys_ns", "read_bytes",
    "write_bytes", "minflt", "majflt", "inblock", "oublock", "nvcsw", "nivcsw", "rows", "nesting_level",
    "errored",
)
_DRAIN_COPY = f"COPY (SELECT {', '.join(_RECORD_COLUMNS)} FROM mwinv_drain({{}})) TO STDOUT (FORMAT csv)"


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

    def fetch(self) -> tuple[pa.Table, list[dict]]:
        """Everything in the ring now (as the `statement` table) and the texts of new query ids.
        COPY as CSV into pyarrow: a drain and its Parquet write run at ~230 k records/s (fetching tuples
        into dicts: ~105 k/s, which fell behind pgbench -S at 80 k statements/s and let the ring drop a
        third of them)."""
        parts = []
        while True:
            data = io.BytesIO()
            with self.conn.cursor().copy(_DRAIN_COPY.format(DRAIN_BATCH)) as copy:
                for chunk in copy:
                    data.write(chunk)
            data.seek(0)
            part = _read_records(data)
            parts.append(part)
            if part.num_rows < DRAIN_BATCH:
                break
        records = pa.concat_tables(parts)
        query_ids = records.column("query_id")
        new_ids = {q for q in pc.unique(query_ids).to_pylist() if q is not None} - self.hashes.keys()
        texts = []
        if new_ids:
            for query_id, text in self.conn.execute(
                "SELECT query_id, query FROM mwinv_texts WHERE query_id = ANY(%s) AND query IS NOT NULL",
                (list(new_ids),),
            ):
                h = text_hash(text)
                self.hashes[query_id] = h
                texts.append({"query_text_hash": h, "query_id": query_id, "text": text})
        n = records.num_rows
        known = pa.array(list(self.hashes), pa.int64())
        hashes = pc.take(pa.array(list(self.hashes.values()), pa.int64()), pc.index_in(query_ids, known))
        records = (records.append_column("node", pa.repeat(pa.scalar(self.node, pa.string()), n))
                   .append_column("dbms", pa.repeat(pa.scalar(DBMS, pa.string()), n))
                   .append_column("query_text_hash", hashes))
        return records, texts

    def write(self, records: pa.Table | list[pa.Table], texts: list[dict]) -> int:
        if texts:
            self.capture.write_part("statement_text", texts, node=self.node)
        tables = records if isinstance(records, list) else [records]
        tables = [t for t in tables if t.num_rows]
        if tables:
            self.capture.write_part("statement", pa.concat_tables(tables), node=self.node)
        return sum(t.num_rows for t in tables)


def _read_records(data: io.BytesIO) -> pa.Table:
    """mwinv_drain()'s CSV (PostgreSQL's: NULL unquoted empty, booleans t/f) typed as `statement`."""
    schema = SCHEMAS["statement"]
    if not data.getbuffer().nbytes:   # an empty ring (pyarrow refuses an empty file)
        return empty_table(pa.schema([schema.field(c) for c in _RECORD_COLUMNS]))
    return pacsv.read_csv(
        data, read_options=pacsv.ReadOptions(column_names=list(_RECORD_COLUMNS)),
        convert_options=pacsv.ConvertOptions(
            column_types={c: schema.field(c).type for c in _RECORD_COLUMNS}, true_values=["t"],
            false_values=["f"], strings_can_be_null=True, quoted_strings_can_be_null=False))


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
    """Drains the ring every `interval_s` in a thread while a capture runs (at once again while a
    drain finds the ring a quarter full or more); writes a part at most every `flush_s` (fewer,
    larger Parquet parts) and everything at stop(). A server that stops or restarts is no error: what
    was drained is kept, and the drainer connects again when the server is back (`disconnects`)."""

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
        self.disconnects = 0

    def start(self) -> "StatementDrainer":
        self._conn = connect_untracked(self.conninfo)
        if not extension_available(self._conn):
            self._conn.close()
            raise MwinvError("mwinv is not in shared_preload_libraries of the server or not installed")
        self._reader = _Reader(self._conn, self.capture, self.node)
        self._capacity = int(self._conn.execute("SHOW mwinv.buffer_size").fetchone()[0])
        self._thread = threading.Thread(target=self._run, name="mwinv-statement-drainer", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        records: list[pa.Table] = []
        texts: list[dict] = []
        last_flush = time.monotonic()
        wait = self.interval_s
        try:
            while not self._stop.wait(wait):
                if self._conn is None and not self._reconnect():
                    continue
                try:
                    r, t = self._reader.fetch()
                except psycopg.OperationalError:   # the server stopped (or was restarted)
                    self._lost_connection()
                    continue
                records.append(r)
                texts += t
                # a ring a quarter full after a wait may be full after the next one (records are then
                # dropped): drain again at once while statements come that fast
                wait = 0 if r.num_rows >= self._capacity // 4 else self.interval_s
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
            if self._error is None and self._conn is not None:
                self.rows_written += self._reader.write(*self._reader.fetch())
        except psycopg.OperationalError:   # the server went away meanwhile: what was drained is written
            self._lost_connection()
        finally:
            if self._conn is not None:
                self._conn.close()
        if self._error is not None:
            raise MwinvError(f"mwinv statement drainer failed: {self._error}") from self._error
        return self.rows_written

    def _lost_connection(self) -> None:
        self.disconnects += 1
        try:
            self._conn.close()
        except psycopg.Error:
            pass
        self._conn = None

    def _reconnect(self) -> bool:
        """Connect again to a server that was stopped or restarted (the texts already known are kept)."""
        try:
            self._conn = connect_untracked(self.conninfo)
        except psycopg.OperationalError:
            return False
        self._reader.conn = self._conn
        return True

    def __enter__(self) -> "StatementDrainer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
