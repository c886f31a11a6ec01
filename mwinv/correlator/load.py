"""Load a capture directory once into DuckDB views, and check it before any analysis: missing
tables, mixed runs, statements outside the trace, end < start, duplicate ids. Problems become
warnings naming the table and row and what was excluded, or a one-line error."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from mwinv.capture.tables import (COMPACT, DERIVED_TABLES, FROM_ATTRIBUTION, RUSAGE_COMPONENTS, SCHEMAS, Capture,
                                  one_valued, rusage_rows)
from mwinv.correlator.modules import Modules, _names, header, modules, step
from mwinv.errors import MwinvError


@dataclass
class CaptureDB:
    capture: Capture
    con: duckdb.DuckDBPyConnection
    tables: set[str]
    warnings: list[str] = field(default_factory=list)
    duty_cycled: bool = False   # kernel events on in windows only: a sample of the statements traced
    modules: Modules | None = None   # the session's runner: what it holds and has built
    parts: object | None = None      # a correlation of the capture in parts (incremental.Parts)
    one_valued: dict = field(default_factory=dict)   # statement's columns of one value: that value
    sources: dict = field(default_factory=dict)      # the parts each capture table's view reads, by table

    def has(self, table: str) -> bool:
        return table in self.tables

    def build(self, *tables: str) -> None:
        """Build these derived tables and what they need, each once in this session (modules.py)."""
        self.modules.build(*tables)

    @property
    def scratch(self) -> Path:
        """The session's own directory (private, removed with the connection): derived tables' parts of a
        session that does not write into its capture."""
        return Path(self.con.execute("SELECT current_setting('temp_directory')").fetchone()[0]).parent / "derived"

    def sql(self, query: str, params=None):
        return self.con.execute(query, params or [])


# How far after a statement's start the read of its command may seem to lie: the error of a DBMS clock's
# mapping to the trace's (MariaDB's marker statement: tens of µs), with room to spare
THREAD_SLACK_NS = 1_000_000


def literal(value: int | str | os.PathLike | None) -> str:
    """An integer, a string (a path, a node name) or None as a SQL literal, the one way any value goes
    into SQL text: binding query parameters makes DuckDB import pandas, which took seconds (29 s on a
    slow disk) in a command that needs none of it, and a view refuses them."""
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(int(value))
    return "'" + os.fspath(value).replace("'", "''") + "'"


def ident(name: str) -> str:
    """A column's name as a SQL identifier, the one way a name read from a capture's files goes into SQL
    text (a part may hold columns beyond the contract's, named as its writer chose)."""
    return '"' + name.replace('"', '""') + '"'


def read_parquet(paths: list[Path]) -> str:
    """DuckDB's read_parquet() of exactly these files: each name a literal with its glob characters
    bracketed (DuckDB expands *, ? and [ in a file name: a part named `*.parquet` read every part)."""
    names = (re.sub(r"([*?\[])", r"[\1]", str(p)) for p in paths)
    return f"read_parquet([{', '.join(map(literal, names))}], union_by_name=true)"


def parts_view(folder: Path) -> str:
    """DuckDB's read_parquet() of every part in a table's folder, those written later too (the folder's
    glob characters bracketed, as read_parquet's)."""
    pattern = re.sub(r"([*?\[])", r"[\1]", str(folder)) + "/*.parquet"
    return f"read_parquet({literal(pattern)}, union_by_name=true)"


def sql_file(name: str) -> str:
    """The SQL of one module run outside a capture's session (the model's views on Arrow tables, the
    advice's), from `mwinv/correlator/sql/<name>.sql`."""
    return (Path(__file__).parent / "sql" / f"{name}.sql").read_text()


def create_empty(con, table: str, kind: str = "TABLE", name: str | None = None) -> None:
    """An empty `table` (or view; named `name`, else as the table) with the columns of its schema."""
    con.execute(f"CREATE OR REPLACE {kind} {name or table} AS {_no_rows(table)}")


def _no_rows(table: str) -> str:
    cols = ", ".join(f"CAST(NULL AS {duck_type(f.type)}) AS \"{f.name}\"" for f in SCHEMAS[table])
    return f"SELECT {cols} WHERE false"


def duck_type(t) -> str:
    import pyarrow as pa

    if pa.types.is_int32(t):
        return "INTEGER"
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_list(t):
        return "VARCHAR[]"
    return "VARCHAR"


def connect(spill_in: Path | None = None, stored: bool = False, **config) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection for the correlator: no progress bar (it wrote over the CLI's own progress
    and into piped output). spill_in: the directory its spill files go under (a capture's: the room a
    long capture's operators spill into is where the capture is, not /tmp). stored: its tables in a
    database file in that directory, compressed, rather than in memory (a session's derived tables)."""
    # spill files in a directory of this connection's own (mkdtemp: 0700, made exclusively): by default
    # every connection spills into ./.tmp under the same file names, and two of them at once (two captures
    # opened in one process, or two analyses in one directory) read each other's pages
    try:
        if spill_in is not None:
            remove_dead_spills(spill_in)
        spill = tempfile.mkdtemp(prefix=SPILL_PREFIX, dir=spill_in)
    except OSError:   # a capture this user may only read: the system's temporary directory
        spill = tempfile.mkdtemp(prefix="mwinv-duckdb-")
    lock = _hold_lock(spill)
    # an in-memory table is kept uncompressed and paged out whole past the memory limit (22 GB of spill
    # for a 600 s capture's 60 M statements); a file's is compressed as it is written, and its pages
    # are dropped, not spilled, past the limit. Closed with the session: no checkpoint is needed.
    # DuckDB's spill files one level down: a connection collected while a cursor of it still ran had its
    # directory removed, and DuckDB made it again with modes 0755/0644 (other users read the spilled
    # statements) and left it; under the removed 0700 directory it cannot
    con = duckdb.connect(os.path.join(spill, "session.duckdb") if stored else ":memory:",
                         config={"temp_directory": os.path.join(spill, "spill"),
                                 # without them DuckDB's jemalloc purges the pages its queries freed only
                                 # when a later allocation comes by: on a 120 s capture it kept 600-800 MiB
                                 # of them between queries, while duckdb_memory() counted 4-70 MiB in use
                                 "allocator_background_threads": True, **config})
    weakref.finalize(con, _drop_spill, spill, lock)
    con.execute("SET enable_progress_bar = false")   # a session option, refused in connect()'s config
    return con


# A session's spill directory in a capture; its `lock` is held while the session lives
SPILL_PREFIX = ".duckdb-spill-"


def _hold_lock(spill: str) -> int:
    """The spill directory's lock, held until the session ends: made under another name, locked, then
    renamed, so that no one finds the lock before it is held."""
    fd = os.open(os.path.join(spill, "lock.new"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(os.path.join(spill, "lock.new"), os.path.join(spill, "lock"))
    return fd


def _drop_spill(spill: str, lock: int) -> None:
    shutil.rmtree(spill, ignore_errors=True)
    os.close(lock)


def remove_dead_spills(directory: str | os.PathLike) -> list[str]:
    """Remove the spill directories that sessions killed in `directory` left (kill -9, the OOM killer): a
    600 s capture's session spilled gigabytes there. One whose lock is free is dead; one without a lock (an
    older mwinv's) or of another user is left. Entries are opened relative to their parent, no symlink
    followed. Returns the names removed."""
    removed = []
    parent = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(parent):
            if not name.startswith(SPILL_PREFIX):
                continue
            try:
                d = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            except OSError:   # a symlink, a file, or gone meanwhile
                continue
            try:
                if os.fstat(d).st_uid != os.geteuid():
                    continue
                lock = os.open("lock", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=d)
            except OSError:
                continue
            finally:
                os.close(d)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:   # its session lives
                os.close(lock)
                continue
            try:
                shutil.rmtree(name, dir_fd=parent, ignore_errors=True)
                removed.append(name)
            finally:
                os.close(lock)
    finally:
        os.close(parent)
    return removed


def open_capture(path: str | Path, threads: int | None = None, memory_limit: str | None = None,
                 nodes: list[str] | None = None) -> CaptureDB:
    """The capture's tables as DuckDB views, checked. DuckDB's memory is capped (None:
    options.default_memory(), from the machine; `mwinv-correlate --memory`) and it spills beyond it
    into the capture's directory: the attribution's numpy slices live outside the cap. nodes: only
    those nodes' rows (a node's correlation on its own)."""
    from mwinv.options import default_memory

    cap = Capture(path)
    if not cap.path.is_dir():
        raise MwinvError(f"{cap.path}: no such capture directory")
    if not cap.manifest_path.exists():
        raise MwinvError(f"{cap.path}: not a capture directory (no manifest.json)")
    manifest = cap.manifest()
    # a capture shared read-only (a member of its --group) spills into a private directory of its own
    con = connect(cap.path if os.access(cap.path, os.W_OK) else None, stored=True,
                  memory_limit=memory_limit or default_memory(),
                  **({"threads": threads} if threads else {}))
    present, sources = set(), {}
    cap.check(*(t for t in SCHEMAS if t not in DERIVED_TABLES))
    for table in SCHEMAS:
        if table in DERIVED_TABLES:
            continue
        parts = cap.parts(table)
        if not parts:
            create_empty(con, table, "VIEW")
            continue
        only = (f" WHERE node IN ({', '.join(literal(n) for n in nodes)})"
                if nodes and "node" in SCHEMAS[table].names else "")
        try:
            # every column of the schema: one a part from an older recorder lacks reads as NULL
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM {read_parquet(parts)}" + only
                        + f" UNION ALL BY NAME {_no_rows(table)}")
            con.execute(f"SELECT * FROM {table} LIMIT 0")
        except duckdb.Error as exc:
            raise MwinvError(f"{cap.table_dir(table)}: unreadable table ({str(exc).splitlines()[0]})") from None
        present.add(table)
        sources[table] = parts
    with reading_parts(cap):
        db = CaptureDB(cap, con, present, duty_cycled=is_duty_cycled(con, manifest), sources=sources)
        db.modules = Modules(db, set(SCHEMAS) - set(DERIVED_TABLES), session_variables(db, manifest))
        _check(db, manifest)
        if db.has("statement"):
            _typed_statement(db)
            _check_duplicates(db)
            db.build("statement_clean", "trace_range", "traced_statement")
            _check_coverage(db)
    return db


def session_variables(db: CaptureDB, manifest: dict) -> dict[str, object]:
    """The variables the modules read (their headers name them): the capture's facts and the
    correlator's constants."""
    from mwinv.correlator import attribution, hotspots

    from mwinv.correlator.advice import BLOCKER_LOOKBACK_NS
    from mwinv.correlator.classify import DEFAULT_INTERNAL_THRESHOLD
    from mwinv.rules import MIN_LOCK_SHARE, MIN_WALL_NS

    return {"duty_cycled": db.duty_cycled, "attributed_until": None, "thread_slack_ns": THREAD_SLACK_NS,
            "coordinator": manifest.get("coordinator"), "scheduler_frames": list(hotspots.SCHEDULER_FRAMES),
            "perf_period_ns": int(manifest.get("perf_sample_period_ns", 1_000_000)), **attribution.variables(),
            "internal_threshold": DEFAULT_INTERNAL_THRESHOLD, "min_wall_ns": MIN_WALL_NS,
            "min_lock_share": MIN_LOCK_SHARE, "blocker_lookback_ns": BLOCKER_LOOKBACK_NS}


@contextlib.contextmanager
def reading_parts(cap: Capture):
    """A query over the capture that failed on a part DuckDB cannot scan (its Parquet reader refuses
    some corruptions Arrow's check let through, e.g. a page header): a one-line error naming the part.
    Any other failure is left as it is."""
    try:
        yield
    except duckdb.Error as exc:
        if not isinstance(exc, duckdb.OutOfMemoryException) and (part := _unscannable_part(cap)):
            raise MwinvError(f"{part}: unreadable Parquet part ({str(exc).splitlines()[0]})") from None
        raise


def _unscannable_part(cap: Capture) -> Path | None:
    con = connect()
    for table in SCHEMAS:
        for p in cap.parts(table):
            try:
                con.execute(f"SELECT max(hash(COLUMNS(*))) FROM {read_parquet([p])}").fetchall()
            except duckdb.Error:
                return p
    return None


def session_tables(db: CaptureDB, schema: str = "main") -> set[str]:
    """The tables and views in `schema` of the session: the capture's and those built so far."""
    return {r[0] for r in db.sql("SELECT table_name FROM information_schema.tables "
                                 f"WHERE table_schema = {literal(schema)}").fetchall()}


@step(builds=("statement_attribution",), inputs=("stored_attribution", "rusage_attribution"))
def statement_attribution(db: CaptureDB) -> None:
    """statement_attribution: per top-level statement (not a parallel worker) one row per component of some
    time (none for a component of 0), its own time (ns, summing to its wall time) and its parallel workers'
    (from_workers_ns): the rows its parts hold and those of the statements of their rusage alone, expanded
    from their one row (tables.COMPACT). A view, the same over a correlation's tables and over a
    correlated capture's parts."""
    cols = ", ".join(SCHEMAS["statement_attribution"].names)
    db.con.execute(f"CREATE VIEW statement_attribution AS SELECT {cols} FROM stored_attribution "
                   f"UNION ALL {rusage_rows('rusage_attribution')}")


@step(builds=("query_attribution",),
      inputs=("stored_attribution", "rusage_attribution", "traced_statement", "statement_link"), variables=("duty_cycled",))
def query_attribution(db: CaptureDB) -> None:
    """query_attribution: statement_attribution summed per query key (query_summary's), node, component and
    whether the statement is traced (duty-cycled only), a linked data node statement left out: the stored
    rows summed, and rusage_attribution's one row a statement summed before it is expanded (rusage_rows of
    the sums): 18 M rows read, not the 124 M expanded ones, on a 120 s capture (1.3 s -> 0.6 s)."""
    traced = "(SELECT node, statement_id FROM traced_statement WHERE getvariable('duty_cycled'))"
    unlinked = "(node, statement_id) NOT IN (SELECT (node, statement_id) FROM statement_link)"
    sums = ", ".join(f"sum({ident(c + '_ns')})::BIGINT AS {ident(c + '_ns')}" for c in RUSAGE_COMPONENTS)
    key = "coalesce(a.query_id, -a.statement_id) AS key, a.node"
    db.con.execute(
        "CREATE VIEW query_attribution AS "
        f"SELECT {key}, t.statement_id IS NOT NULL AS traced, a.component, sum(a.ns) AS ns, "
        f"sum(a.from_workers_ns) AS from_workers_ns "
        f"FROM stored_attribution a LEFT JOIN {traced} t USING (node, statement_id) WHERE {unlinked} GROUP BY ALL "
        # a statement of its rusage alone is one no trace window covers: not looked up in traced_statement
        # (probing it with 10.5 M rusage statements took 0.35 of query_summary's 1.37 s at 120 s)
        "UNION ALL " + rusage_rows(f"(SELECT {key}, false AS traced, {sums} FROM rusage_attribution a "
                                   f"WHERE {unlinked} GROUP BY ALL)", keys=("key", "node", "traced")))


# What a derived table's parts hold, read back and written from: statement_attribution's the rows of the
# statements whose rows are summed (the others' are rusage_attribution's)
STORED_AS = {"statement_attribution": "stored_attribution"}


def open_correlated(path: str | Path, rebuild: tuple[str, ...] = (),
                    read_as: dict[str, str] | None = None, memory_limit: str | None = None) -> CaptureDB:
    """open_capture, with the derived tables a correlation wrote read back (views of their parts), but
    those in `rebuild`, and the list of queries (query_summary) built from them; read_as: tables read back
    materialized, under the names given (a merge reads the nodes' attribution as its summed_attribution
    and rusage_attribution, and replaces the parts it reads); memory_limit: open_capture's."""
    from mwinv.correlator.incremental import written_until

    db = open_capture(path, memory_limit=memory_limit)
    read_as = read_as or {}
    # a capture correlated so far in parts: its statements from the last part's cut on are not attributed yet
    db.modules.variables["attributed_until"] = written_until(db.capture)
    for table in DERIVED_TABLES:
        if not db.capture.parts(table) or table in rebuild or db.modules.holds(table):   # traced_statement: built
            continue
        name = read_as.get(table, STORED_AS.get(table, table))
        kind = "TABLE" if table in read_as else "VIEW"
        db.con.execute(f"CREATE {kind} {name} AS SELECT * FROM {parts_view(db.capture.table_dir(table))}")
        db.modules.provide(name)
        db.tables.add(name)
    for table, compact in COMPACT.items():
        # an older correlation's parts hold every row (no compact ones), a later one's may hold none
        names = [read_as.get(t, STORED_AS.get(t, t)) for t in (table, compact)]
        if table in rebuild or not any(map(db.modules.holds, names)):
            continue
        for t, name in zip((table, compact), names):
            if not db.modules.holds(name):
                create_empty(db.con, t, "TABLE" if t in read_as else "VIEW", name=name)
                db.modules.provide(name)
        if table not in read_as:
            db.build(table)
            db.tables.add(table)
    if db.has("statement") and (db.modules.holds("statement_attribution")
                                or db.modules.variables["attributed_until"] is not None):
        # what a correlation writes only when it has rows (the first part of a capture correlated in
        # parts may have none yet), and links before links were made (or a node's own correlation): none
        stored = {name: table for table, name in STORED_AS.items()}
        for name in ("statement_attribution", "stored_attribution", "rusage_attribution", "statement_link",
                     "statement_io", "statement_kernel_function"):
            table = stored.get(name, name)
            if not db.modules.holds(name) and table not in rebuild:
                create_empty(db.con, table, name=name)
                db.modules.provide(name)
        db.build("query_summary")
    return db


# A derived table of more rows than this is written as one part per DuckDB thread at once, each of its
# statements by hash(statement_id): Arrow writes a part on one core (a 120 s pgbench capture's 124 M
# attribution rows: 11.2 s as one part, 8.2 s as two at once on 2 cores); at most PARALLEL_PARTS,
# since each part's query reads all of the table's inputs to keep its share
PARALLEL_ROWS = 16_000_000
PARALLEL_PARTS = 8


def write_derived(db: CaptureDB, table: str, where: str | None, prefix: str) -> None:
    """`table`'s rows (its stored ones: STORED_AS; `where`: an SQL condition, or None for all) as parts of the
    capture's table named by prefix, after those already there; a large one in parts written at once
    (PARALLEL_ROWS), streamed."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    from mwinv.correlator.modules import sql_literal

    conds = [where] if where else []
    source = STORED_AS.get(table, table)
    rows = db.sql(f"SELECT count(*) FROM {source}" + "".join(f" WHERE {c}" for c in conds)).fetchone()[0]
    if not rows:
        return
    threads = int(db.sql("SELECT current_setting('threads')").fetchone()[0])
    n = min(threads, PARALLEL_PARTS) if rows > PARALLEL_ROWS else 1
    if n == 1:
        query = f"SELECT * FROM {source}" + "".join(f" WHERE {c}" for c in conds)
        db.capture.write_part(table, db.sql(query).to_arrow_reader(1 << 20), node=prefix)
        return

    stop = threading.Event()

    def part(i: int, into: Path) -> None:
        cur = db.con.cursor()   # a connection of its own: the variables the views read set again
        for name, value in db.modules.variables.items():
            cur.execute(f"SET VARIABLE {name} = {sql_literal(value)}")
        cond = " AND ".join([*conds, f"hash(statement_id) % {literal(n)} = {literal(i)}"])
        reader = cur.execute(f"SELECT * FROM {source} WHERE {cond}").to_arrow_reader(1 << 20)

        def batches():
            for batch in reader:
                if stop.is_set():
                    raise MwinvError(f"{table}: writing stopped")
                yield batch
        Capture(into).write_part(table, pa.RecordBatchReader.from_batches(reader.schema, batches()), node=prefix)

    # each part written aside (a private directory of the session, in the capture), then all moved in, in order
    with tempfile.TemporaryDirectory(prefix="parts-", dir=db.scratch.parent) as tmp:
        dirs = [Path(tmp) / str(i) for i in range(n)]
        with ThreadPoolExecutor(n) as pool:
            futures = [pool.submit(part, i, d) for i, d in enumerate(dirs)]
            try:
                for f in futures:
                    f.result()
            except BaseException:   # a part failed, or Ctrl-C: the others stop at their next batch
                stop.set()
                raise
        for d in dirs:
            db.capture.take_parts(Capture(d))


def remove_stale(capture: Capture) -> None:
    """Remove the tables derived from the attribution and the calibration (derive.py): a new correlation
    or calibration would otherwise leave them describing the old one."""
    for table in FROM_ATTRIBUTION:
        shutil.rmtree(capture.table_dir(table), ignore_errors=True)


def _check(db: CaptureDB, manifest: dict) -> None:
    for node, info in (manifest.get("nodes") or {}).items():   # a capture that did not stop (recover_kernel)
        db.warnings += [f"node {node}: {info[key]}" for key in ("kernel_unparsed", "kernel_recovered", "kernel_errors")
                        if info.get(key)]
    if not db.has("statement"):
        db.warnings.append("table statement: missing (no DBMS-side capture): no per-statement attribution possible")
        return
    if not db.sql("SELECT count(*) FROM statement").fetchone()[0]:
        db.warnings.append(f"table statement: empty ({len(db.capture.parts('statement'))} parts, no rows): "
                           "no per-statement attribution possible")
        return
    for node, info in (manifest.get("nodes") or {}).items():
        if info.get("statements_lost"):
            db.warnings.append(f"node {node}: {info['statements_lost']}")
    run = manifest.get("run_id")
    if run is not None:
        other = db.sql("SELECT DISTINCT run_id FROM statement WHERE run_id IS NOT NULL AND run_id <> "
                       + literal(run)).fetchall() if "run_id" in _columns(db, "statement") else []
        if other:
            raise MwinvError(f"table statement: rows from run {other[0][0]!r}, manifest says {run!r}")
    bad = db.sql("SELECT statement_id, node, start_ns, end_ns FROM statement WHERE end_ns < start_ns "
                 "OR start_ns IS NULL OR end_ns IS NULL").fetchall()
    for sid, node, s, e in bad[:5]:
        db.warnings.append(f"table statement: statement_id {sid} on {node} has end {e} < start {s}: excluded")
    if len(bad) > 5:
        db.warnings.append(f"table statement: {len(bad) - 5} more statements with end < start: excluded")


def _check_duplicates(db: CaptureDB) -> None:
    """Warnings for statement ids recorded more than once on a node (statement_dup; the first row is kept)."""
    db.build("statement_dup")
    dups = db.sql("SELECT node, statement_id, n FROM statement_dup ORDER BY n DESC, node, statement_id").fetchall()
    for node, sid, n in dups[:5]:
        db.warnings.append(f"table statement: statement_id {sid} on {node} appears {n} times: first kept")
    if len(dups) > 5:
        db.warnings.append(f"table statement: {len(dups) - 5} more duplicate statement ids: first kept")


def is_duty_cycled(con: duckdb.DuckDBPyConnection, manifest: dict) -> bool:
    """Kernel events were on in windows only: a recorder with a duty below 1, or whose event budget
    lowered it (its first window may be its only one), or, in a capture from before the manifest said
    so, more than one window on a node (con: the capture's trace_window, possibly empty)."""
    for info in manifest.get("nodes", {}).values():
        if (info.get("duty") or 1) < 1 or any(c["duty"] < 1 for c in info.get("duty_changes") or []):
            return True
    return con.execute("SELECT coalesce(max(n), 0) > 1 FROM "
                       "(SELECT count(*) AS n FROM trace_window GROUP BY node)").fetchone()[0]


def _check_coverage(db: CaptureDB) -> None:
    """Warnings for statements the kernel trace does not cover (needs trace_range); in a duty-cycled
    capture most lie between its windows by design (the report says so)."""
    if db.has("kernel_event") and not db.duty_cycled:
        rng = {n: (lo, hi) for n, lo, hi in db.sql("SELECT node, lo, hi FROM trace_range").fetchall()}
        outside = db.sql("""
            SELECT s.node, count(*), min(s.statement_id)
            FROM statement_clean s LEFT JOIN trace_range r USING (node)
            WHERE r.node IS NULL OR s.end_ns < r.lo OR s.start_ns > r.hi GROUP BY s.node""").fetchall()
        for node, n, sid in outside:
            where = "no kernel events on that node" if node not in rng else "outside the kernel trace's time range"
            db.warnings.append(f"table statement: {n} statements on {node} (first statement_id {sid}) lie {where}: "
                               "their kernel-side attribution is excluded (rusage only); check the clocks")


def _typed_statement(db: CaptureDB) -> None:
    """`statement_typed`: the capture's statement with every column of the contract (a capture from an
    older recorder lacks the newer ones: NULL), what sql/statement_varying.sql reads; and its columns
    that hold one value (db.one_valued, the variable one_valued)."""
    have = _columns(db, "statement")
    absent = "".join(f", CAST(NULL AS {duck_type(f.type)}) AS \"{f.name}\""
                     for f in SCHEMAS["statement"] if f.name not in have)
    db.con.execute(f"CREATE VIEW statement_typed AS SELECT *{absent} FROM statement")
    db.modules.provide("statement_typed")
    # a column of one value is a constant of statement_clean's view, not copied into its table: of the
    # 3.9 s a 120 s capture's statements took to copy, 2.1 s went to its node, DBMS, database and user
    # (one value each), 0.8 s to copy the rest but its 20 columns of one value; this finds them in 0.6 s.
    # pid: statement_thread's may differ
    # the contract's columns only, whose types the capture's check verified
    names = [n for n in SCHEMAS["statement"].names if n != "pid"]
    found = one_valued(db.capture.parts("statement"), names)
    if found is None:   # a part without statistics: every column scanned
        one = db.sql("SELECT " + ", ".join(f"min({ident(n)}) IS NOT DISTINCT FROM max({ident(n)}) "
                                           f"AND count({ident(n)}) IN (0, count(*)), min({ident(n)})" for n in names)
                     + " FROM statement_typed").fetchone()
        found = {n: one[2 * i + 1] for i, n in enumerate(names) if one[2 * i]}
    db.one_valued = {n: v for n, v in found.items() if isinstance(v, (int, str, type(None)))}
    db.modules.variables["one_valued"] = list(db.one_valued)
    db.modules.variables["statement_ids_unique"] = _ids_unique(db)


# Statement ids recorded once each are found by a bitmap of their range (DuckDB's bitstring_agg), not by
# grouping every id (sql/statement_dup.sql): a 600 s capture's 23 M ids in 1.2 s (the range's ends
# included) against 2.8 s. Where the range holds at most this many ids a statement (a byte a statement), or
# fits in ID_BITMAP_BITS (16 MiB: a recorder gives each backend a block of ids, so few statements
# of many backends spread wide); a wider range is grouped.
ID_BITS_PER_STATEMENT = 8
ID_BITMAP_BITS = 1 << 27


def _ids_unique(db: CaptureDB) -> bool:
    """Whether every statement id of the capture is recorded once (False where not known)."""
    lo, hi, n = db.sql("SELECT min(statement_id), max(statement_id), count(*) FROM statement_typed").fetchone()
    if lo is None or hi - lo >= max(ID_BITS_PER_STATEMENT * n, ID_BITMAP_BITS):
        return False
    return db.sql(f"SELECT bit_count(bitstring_agg(statement_id, {literal(lo)}, {literal(hi)})) "
                  "FROM statement_typed").fetchone()[0] == n


@step(builds=("statement_clean",), inputs=("statement_varying", "statement_typed"))
def statement_clean(db: CaptureDB) -> None:
    """statement_clean: the statements every analysis reads, in the columns of statement_typed (their
    order too): a view of statement_varying's rows (sql/statement_varying.sql) with the columns of one
    value as constants."""
    _constants_view(db, "statement_clean", "statement_varying",
                    [n for n, *_ in db.sql("DESCRIBE statement_typed").fetchall()])


@step(builds=("slice_statement",), inputs=("slice_varying", "statement_typed"))
def slice_statement_view(db: CaptureDB) -> None:
    """slice_statement: slice_varying's rows (sql/slice_statement.sql) in the columns its header names, those
    of one value as constants: 60 M statements sorted and copied with their node's text took 15 s."""
    sql = next(m for m in modules() if m.builds == ("slice_varying",)).sql
    _constants_view(db, "slice_statement", "slice_varying", _names(header(sql, "slice_statement.sql")["columns"]))


def _constants_view(db: CaptureDB, view: str, table: str, names: list[str]) -> None:
    """The view `view` of `table`'s rows in the columns `names`, those of one value (db.one_valued) as
    constants typed as in statement_typed."""
    types = dict(db.sql("SELECT column_name, column_type FROM (DESCRIBE statement_typed)").fetchall())
    cols = (f'CAST({literal(db.one_valued[n])} AS {types[n]}) AS {ident(n)}' if n in db.one_valued else ident(n)
            for n in names)
    db.con.execute(f"CREATE VIEW {view} AS SELECT {', '.join(cols)} FROM {table}")


def _columns(db: CaptureDB, table: str) -> set[str]:
    return {r[0] for r in db.sql(f"DESCRIBE {table}").fetchall()}
