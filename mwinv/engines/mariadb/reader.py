"""MariaDB's statements from performance_schema into the capture tables, while a capture runs.

The statement consumers are switched on for the capture and restored after it; the history ring
(events_statements_history_long, 1,000 rows here by default) is drained every `interval_s`; each
statement gets the OS thread of its connection (threads.THREAD_OS_ID, read as the threads come and
go), its digest and text, rows, errors, temporary tables, sort merges and index flags. Statements
the ring overwrote before a drain are counted from the server's own statement counters, never lost
silently.

Times: performance_schema's TIMER_START/END are picoseconds on the server's statement timer since it
started; the common `NOW() - Uptime` recipe is off by seconds. Here a marker statement is sent between
two CLOCK_MONOTONIC reads and its TIMER_START read back: the offset is the middle of the two reads minus
the marker's start, its error at most half their gap (the tightest of MARKERS tries); measured at the
start and the end, and a statement's time is mapped by the offset interpolated between the two."""

from __future__ import annotations

import threading
import time

from mwinv.capture.tables import Capture, text_hash
from mwinv.engines.sqltext import normalized
from mwinv.errors import MwinvError

DBMS = "mariadb"
MARKERS = 7
THREADS_EVERY_S = 0.02
SETTLE_S = 0.1    # a busy server has statements in flight at any time: the wait stays short
CONSUMERS = ("events_statements_current", "events_statements_history", "events_statements_history_long")
STAT_COLUMNS = ("ROWS_EXAMINED", "CREATED_TMP_TABLES", "CREATED_TMP_DISK_TABLES", "SORT_MERGE_PASSES",
                "NO_INDEX_USED", "NO_GOOD_INDEX_USED", "SELECT_FULL_JOIN", "SELECT_SCAN", "WARNINGS", "MYSQL_ERRNO")
HISTORY_SQL = f"""
    SELECT THREAD_ID, EVENT_ID, EVENT_NAME, TIMER_START, TIMER_END, LOCK_TIME, SQL_TEXT, DIGEST, DIGEST_TEXT,
           CURRENT_SCHEMA,
           ROWS_SENT, ROWS_AFFECTED, ERRORS, NESTING_EVENT_ID, NESTING_EVENT_TYPE, NESTING_EVENT_LEVEL,
           {", ".join(STAT_COLUMNS)}
    FROM performance_schema.events_statements_history_long
    WHERE END_EVENT_ID IS NOT NULL AND TIMER_END >= %s AND TIMER_END > %s"""
# A statement enters the history when it ends, not quite in the order of its end times across threads:
# each drain reads back this far before the latest end it saw (the rows it has already are skipped).
OVERLAP_PS = 50_000_000_000
# A server-side prepared statement's execution (COM_STMT_EXECUTE: sysbench's default, JDBC with
# useServerPrepStmts, PDO native prepares) is `statement/com/Execute` with no text and no digest in
# MariaDB 10.11's performance_schema, whose prepared_statements_instances lists each connection's
# prepared texts but counts no executions of them: an execution's text is known where its connection
# had prepared one text only, else the loss is said.
EXECUTE = "statement/com/Execute"
PREPARED_UNKNOWN = ("(execution of a server-side prepared statement: performance_schema does not say which of "
                    "its connection's prepared statements it ran)")
PREPARED_SQL = """SELECT OWNER_THREAD_ID, STATEMENT_ID, SQL_TEXT FROM performance_schema.prepared_statements_instances
                  WHERE SQL_TEXT IS NOT NULL"""
COUNTS_SQL = """
    SELECT (SELECT SUM(COUNT_STAR) FROM performance_schema.events_statements_summary_global_by_event_name),
           (SELECT SUM(COUNT_STAR) FROM performance_schema.events_statements_summary_by_thread_by_event_name
            WHERE THREAD_ID IN (%s, %s))"""


def _digest_id(digest: str | None, text: str) -> int:
    """The digest (32 hex digits) as a signed 64-bit query id; the text's hash where there is none."""
    if not digest:
        return text_hash(text)
    return int.from_bytes(bytes.fromhex(digest[:16]), "big", signed=True)


class PerfSchemaReader:
    def __init__(self, connect, capture: Capture, node: str, interval_s: float = 0.25, general_log: bool = False):
        """connect: a callable returning a new PyMySQL connection (autocommit) to the server; general_log:
        switch the general query log on (to its table) for the capture, restored after it, for the text of
        each execution of a server-side prepared statement."""
        self.connect, self.capture, self.node, self.interval_s = connect, capture, node, interval_s
        self.general_log = general_log
        self.saved_log: tuple | None = None
        self.executes: dict[int, list[tuple[int, str]]] = {}   # connection id -> (wall ns, text) of its Executes
        self.conn_ids: dict[int, int] = {}   # THREAD_ID -> PROCESSLIST_ID
        self.rows: list[dict] = []
        self.threads: dict[int, tuple[int | None, str | None]] = {}   # THREAD_ID -> (THREAD_OS_ID, user)
        # THREAD_ID -> its connection's socket (the fd in mariadbd): with the thread pool, THREAD_OS_ID is only
        # the worker a connection last ran on; the worker that read a statement's command on this fd ran it
        # (the correlator's statement_thread step)
        self.sockets: dict[int, int] = {}
        self.recent: dict[tuple[int, int], int] = {}   # (THREAD_ID, EVENT_ID) -> TIMER_END of recent rows
        self.prepared: dict[int, dict[int, str]] = {}   # THREAD_ID -> STATEMENT_ID -> its prepared text
        self.last_end = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # ---- set-up and restore
    def start(self) -> "PerfSchemaReader":
        self.conn = self.connect()
        cur = self.conn.cursor()
        cur.execute("SELECT @@performance_schema")
        if not cur.fetchone()[0]:
            raise MwinvError("MariaDB runs without performance_schema (set performance_schema=ON and restart)")
        cur.execute(f"SELECT NAME, ENABLED FROM performance_schema.setup_consumers WHERE NAME IN {CONSUMERS!r}")
        self.saved_consumers = dict(cur.fetchall())
        cur.execute("SELECT NAME, ENABLED, TIMED FROM performance_schema.setup_instruments "
                    "WHERE NAME LIKE 'statement/%' AND (ENABLED = 'NO' OR TIMED = 'NO')")
        self.saved_instruments = cur.fetchall()
        cur.execute(f"UPDATE performance_schema.setup_consumers SET ENABLED = 'YES' WHERE NAME IN {CONSUMERS!r}")
        cur.execute("UPDATE performance_schema.setup_instruments SET ENABLED = 'YES', TIMED = 'YES' "
                    "WHERE NAME LIKE 'statement/%'")
        # what ended before the capture is left out by its end time, not truncated away: truncating needs
        # DROP on the table, and other tools on a server may be reading the history
        cur.execute("SELECT coalesce(max(TIMER_END), 0) FROM performance_schema.events_statements_history_long")
        self.floor_ps = int(cur.fetchone()[0])
        if self.general_log:
            self._general_log_on(cur)
        self.my_thread = self._thread_id(cur)
        cur.execute("SELECT @@performance_schema_events_statements_history_long_size, @@thread_handling")
        self.ring_size, handling = cur.fetchone()
        self.thread_per_connection = handling == "one-thread-per-connection"
        self.clock_start = self._measure_clock(cur)
        self.poll_conn = self.connect()
        self.poll_thread = self._thread_id(self.poll_conn.cursor())
        self.counts_start = self._counts(cur)
        self._thread = threading.Thread(target=self._run, name="mwinv-mariadb-reader", daemon=True)
        self._thread.start()
        return self

    @staticmethod
    def _thread_id(cur) -> int:
        cur.execute("SELECT THREAD_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()")
        return cur.fetchone()[0]

    def _counts(self, cur) -> tuple[int, int, int]:
        """(statements the server has run, those of this reader's two connections, CLOCK_MONOTONIC)."""
        cur.execute(COUNTS_SQL, (self.my_thread, self.poll_thread))
        total, own = cur.fetchone()
        return int(total or 0), int(own or 0), time.monotonic_ns()

    def _settle(self, cur) -> None:
        """Wait (at most SETTLE_S) until no other thread is inside a statement: the server ends a statement
        after its client has the result, and the last drain missed TPC-H's Q22 so once in 6 runs."""
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            cur.execute("SELECT count(*) FROM performance_schema.events_statements_current "
                        "WHERE END_EVENT_ID IS NULL AND THREAD_ID NOT IN (%s, %s)", (self.my_thread, self.poll_thread))
            if not cur.fetchone()[0]:
                return
            time.sleep(0.002)

    def _general_log_on(self, cur) -> None:
        cur.execute("SELECT @@global.general_log, @@global.log_output, UNIX_TIMESTAMP(NOW(6))")
        on, output, self.log_from = cur.fetchone()
        self.saved_log = (on, output)
        outputs = [o for o in output.upper().split(",") if o not in ("NONE", "")]
        cur.execute("SET GLOBAL log_output = %s", (",".join(dict.fromkeys(outputs + ["TABLE"])),))
        cur.execute("SET GLOBAL general_log = ON")

    def _read_general_log(self, cur) -> None:
        """The Execute commands the general log's table holds since the capture began, per connection in the
        order they came (the table's order: it is a CSV file appended to)."""
        cur.execute("SELECT thread_id, UNIX_TIMESTAMP(event_time), argument FROM mysql.general_log "
                    "WHERE command_type = 'Execute' AND event_time >= FROM_UNIXTIME(%s)", (self.log_from,))
        for conn_id, at, text in cur.fetchall():
            self.executes.setdefault(conn_id, []).append((int(at * 1_000_000) * 1000, text))

    def _restore(self, cur) -> None:
        if self.saved_log is not None:
            cur.execute("SET GLOBAL general_log = %s", (self.saved_log[0],))
            cur.execute("SET GLOBAL log_output = %s", (self.saved_log[1],))
        for name, enabled in self.saved_consumers.items():
            cur.execute("UPDATE performance_schema.setup_consumers SET ENABLED = %s WHERE NAME = %s", (enabled, name))
        for name, enabled, timed in self.saved_instruments:
            cur.execute("UPDATE performance_schema.setup_instruments SET ENABLED = %s, TIMED = %s WHERE NAME = %s",
                        (enabled, timed, name))

    # ---- the clock
    def _measure_clock(self, cur) -> dict:
        best = None
        for k in range(MARKERS):
            marker = f"SELECT 'mwinv-clock-{time.monotonic_ns()}-{k}'"
            t0 = time.monotonic_ns()
            cur.execute(marker)
            cur.fetchall()
            t1 = time.monotonic_ns()
            cur.execute("SELECT TIMER_START FROM performance_schema.events_statements_history "
                        "WHERE THREAD_ID = %s AND SQL_TEXT = %s", (self.my_thread, marker))
            row = cur.fetchone()
            if row and (best is None or t1 - t0 < best[1] - best[0]):
                best = (t0, t1, row[0])
        if best is None:
            raise MwinvError("performance_schema kept no marker statement (events_statements_history is off?)")
        t0, t1, start_ps = best
        mid = (t0 + t1) // 2
        return {"at_ns": mid, "offset_ns": mid - start_ps // 1000, "error_ns": (t1 - t0 + 1) // 2}

    def to_mono(self, ps: int) -> int:
        a, b = self.clock_start, getattr(self, "clock_end", None) or self.clock_start
        ns = ps // 1000
        span = (b["at_ns"] - a["at_ns"]) or 1
        guess = ns + a["offset_ns"]
        return ns + a["offset_ns"] + (b["offset_ns"] - a["offset_ns"]) * (guess - a["at_ns"]) // span

    # ---- draining
    def _poll_threads(self, cur) -> None:
        cur.execute("SELECT THREAD_ID, THREAD_OS_ID, PROCESSLIST_USER, PROCESSLIST_ID FROM performance_schema.threads")
        for tid, os_id, user, conn_id in cur.fetchall():
            self.threads[tid] = (os_id, user)
            if conn_id is not None:
                self.conn_ids[tid] = conn_id
        cur.execute("SELECT THREAD_ID, SOCKET_ID FROM performance_schema.socket_instances "
                    "WHERE THREAD_ID IS NOT NULL AND PORT IS NOT NULL AND STATE IS NOT NULL")
        for tid, fd in cur.fetchall():
            self.sockets[tid] = fd
        cur.execute(PREPARED_SQL)
        for tid, stmt_id, text in cur.fetchall():
            self.prepared.setdefault(tid, {})[stmt_id] = text

    def _poll(self, cur) -> int:
        """Drain what ended since the last drain (less OVERLAP_PS); returns the rows new to it."""
        self._poll_threads(cur)
        cur.execute(HISTORY_SQL, (max(0, self.last_end - OVERLAP_PS), self.floor_ps))
        cols = [d[0] for d in cur.description]
        new = 0
        for values in cur.fetchall():
            r = dict(zip(cols, values))
            key = (r["THREAD_ID"], r["EVENT_ID"])
            if key in self.recent:
                continue
            self.recent[key] = r["TIMER_END"]
            self.last_end = max(self.last_end, r["TIMER_END"])
            new += 1
            if r["THREAD_ID"] != self.my_thread:
                self.rows.append(r)
        floor = self.last_end - 2 * OVERLAP_PS     # keys older than any later drain reads back are dropped
        self.recent = {k: t for k, t in self.recent.items() if t >= floor}
        return new

    def _run(self) -> None:
        """Drain until stopped; then count what the server ran (before the last drain, so that a statement
        that ends in between is captured and not counted, never the other way round), drain a last time."""
        try:
            cur = self.poll_conn.cursor()
            last, wait = time.monotonic(), self.interval_s
            # a connection's OS thread is known only while it lives: the threads are read often (a
            # 50-row read); the history at interval_s, or sooner when statements come fast enough to
            # fill a quarter of the ring before then (sysbench OLTP: ~50,000 statements/s)
            while not self._stop.wait(THREADS_EVERY_S):
                now = time.monotonic()
                if now - last >= wait:
                    rate = self._poll(cur) / max(now - last, 1e-3)
                    wait = min(self.interval_s, self.ring_size / 4 / max(rate, 1.0))
                    last = now
                else:
                    self._poll_threads(cur)
            self._settle(cur)
            self.counts_end = self._counts(cur)
            self._poll(cur)
        except BaseException as exc:
            self._error = exc
        finally:
            self.poll_conn.close()

    def stop(self) -> dict:
        """The last drain, the end clock, overwritten statements counted, the setup restored, the tables
        written."""
        self.finish()
        return self.write()

    def finish(self) -> None:
        """The last drain, the end clock, the setup restored; the statements are kept for write()."""
        self._stop.set()
        self._thread.join()
        cur = self.conn.cursor()
        try:
            self.clock_end = self._measure_clock(cur)
            if self.saved_log is not None:
                self._read_general_log(cur)
        finally:
            self._restore(cur)
            self.conn.close()
        if self._error is not None:
            raise MwinvError(f"performance_schema reader failed: {self._error}") from self._error
        self.rows = [r for r in self.rows if r["THREAD_ID"] != self.poll_thread]

    def write(self, bound=None) -> dict:
        """The tables written; overwritten statements counted. bound: (windows, slack_ns) -> (narrowed
        windows, why the others were not) (bounds.socket_bounds over the kernel trace), applied with a thread per connection only: with
        the thread pool, performance_schema's thread is not the one that ran the statement."""
        (total0, own0, _), (total1, own1, at) = self.counts_start, self.counts_end
        executed = (total1 - total0) - (own1 - own0)
        ended_before = sum(1 for r in self.rows if self.to_mono(r["TIMER_END"]) <= at)
        narrowed, unbounded = (bound(self.windows(), self.clock_slack())
                               if bound is not None and self.thread_per_connection else ({}, {}))
        info = self._write(max(0, executed - ended_before), executed, narrowed)
        return {**info, "windows_not_bounded": unbounded}

    def windows(self) -> dict:
        """(THREAD_ID, EVENT_ID) -> (os pid, start, end) of each top-level statement, by the markers' mapping."""
        return {(r["THREAD_ID"], r["EVENT_ID"]): (self.threads.get(r["THREAD_ID"], (None, None))[0],
                                                 self.to_mono(r["TIMER_START"]), self.to_mono(r["TIMER_END"]))
                for r in self.rows if not r["NESTING_EVENT_LEVEL"]}

    def clock_slack(self) -> int:
        """The markers' mapping error, ns."""
        return max(c["error_ns"] for c in (self.clock_start, getattr(self, "clock_end", None)) if c)

    def _logged_texts(self, wall: int) -> dict[tuple[int, int], str]:
        """(THREAD_ID, EVENT_ID) -> the text the general log wrote for that Execute: per connection, its
        Executes in performance_schema (in EVENT_ID order) against the log's, at the shift that puts them
        closest in time (the log may hold a few more at either end, written before the first or after the
        last drain); a connection whose sequences do not line up within 1 ms keeps none."""
        out: dict[tuple[int, int], str] = {}
        mine: dict[int, list[dict]] = {}
        for r in self.rows:
            if r["EVENT_NAME"] == EXECUTE and not r["SQL_TEXT"]:
                mine.setdefault(r["THREAD_ID"], []).append(r)
        for tid, rows in mine.items():
            logged = self.executes.get(self.conn_ids.get(tid), [])
            rows.sort(key=lambda r: r["EVENT_ID"])
            if len(logged) < len(rows):
                continue
            starts = [self.to_mono(r["TIMER_START"]) + wall for r in rows]

            def cost(k: int) -> int:
                return sorted(abs(at - st) for (at, _), st in zip(logged[k:], starts))[len(starts) // 2]
            best = min(range(min(len(logged) - len(rows), 50) + 1), key=cost)
            if cost(best) < 1_000_000:
                out.update({(tid, r["EVENT_ID"]): text for r, (_, text) in zip(rows, logged[best:])})
        return out

    def _prepared_text(self, thread_id: int, counts: dict) -> tuple[str, str | None]:
        """An Execute's text: its connection's one prepared text, else PREPARED_UNKNOWN; (text, digest)."""
        counts["executions"] += 1
        texts = set(self.prepared.get(thread_id, {}).values())
        if len(texts) != 1:
            return PREPARED_UNKNOWN, None
        counts["recovered"] += 1
        return texts.pop(), None

    def _write(self, lost: int, executed: int, narrowed: dict) -> dict:
        base = 1
        if self.capture.has("statement"):
            t = self.capture.read("statement")
            base = max((s for n, s in zip(t.column("node").to_pylist(), t.column("statement_id").to_pylist())
                        if n == self.node), default=0) + 1
        sid = {(r["THREAD_ID"], r["EVENT_ID"]): base + k for k, r in enumerate(self.rows)}
        statements, texts, stats, seen_text = [], [], [], set()
        unknown_threads = 0
        wall = time.time_ns() - time.monotonic_ns()
        prepared = {"executions": 0, "recovered": 0}
        logged = self._logged_texts(wall)
        for r in self.rows:
            key = (r["THREAD_ID"], r["EVENT_ID"])
            text, digest = r["SQL_TEXT"] or "", r["DIGEST"]
            qid = None
            if key in logged:
                # the log writes the parameters' values in: the prepared text of that shape stands for it
                shape = normalized(logged[key])
                text = next((t for t in self.prepared.get(r["THREAD_ID"], {}).values() if normalized(t) == shape),
                            logged[key])
                qid = text_hash(shape)
                prepared["executions"] += 1
                prepared["recovered"] += 1
            elif r["EVENT_NAME"] == EXECUTE and not text:
                text, digest = self._prepared_text(r["THREAD_ID"], prepared)
            h = text_hash(text)
            qid = qid if qid is not None else _digest_id(digest, text)
            if h not in seen_text:
                seen_text.add(h)
                texts.append({"query_text_hash": h, "query_id": qid, "text": text})
            os_id, user = self.threads.get(r["THREAD_ID"], (None, None))
            unknown_threads += os_id is None
            start, end = narrowed.get(key) or (self.to_mono(r["TIMER_START"]), self.to_mono(r["TIMER_END"]))
            parent = sid.get((r["THREAD_ID"], r["NESTING_EVENT_ID"])) if r["NESTING_EVENT_TYPE"] == "STATEMENT" else None
            statements.append({
                "node": self.node, "dbms": DBMS, "pid": os_id, "statement_id": sid[key],
                "parent_statement_id": parent, "query_id": qid, "query_text_hash": h,
                "database": r["CURRENT_SCHEMA"], "username": user, "start_ns": start, "end_ns": end,
                "start_wall_ns": start + wall, "rows": (r["ROWS_SENT"] or 0) + (r["ROWS_AFFECTED"] or 0),
                "nesting_level": r["NESTING_EVENT_LEVEL"] or 0, "errored": bool(r["ERRORS"]),
            })
            sid_r = sid[key]
            stats += [{"node": self.node, "statement_id": sid_r, "name": c.lower(), "value": int(r[c] or 0)}
                      for c in STAT_COLUMNS if r[c]]
            if (fd := self.sockets.get(r["THREAD_ID"])) is not None:
                stats.append({"node": self.node, "statement_id": sid_r, "name": "socket_fd", "value": int(fd)})
            if r["LOCK_TIME"]:
                stats.append({"node": self.node, "statement_id": sid_r, "name": "lock_time_ns",
                              "value": int(r["LOCK_TIME"]) // 1000})
        for table, rows in (("statement", statements), ("statement_text", texts), ("statement_stat", stats)):
            if rows:
                self.capture.write_part(table, rows, node=self.node)
        info = {"statements": len(statements), "statements_executed": executed, "statements_overwritten": lost,
                "prepared_executions": prepared["executions"], "prepared_recovered": prepared["recovered"],
                "prepared_texts": sorted({t for ps in self.prepared.values() for t in ps.values()})[:50],
                "threads_unknown": unknown_threads, "history_long_size": self.ring_size,
                "windows_bounded_by_socket_calls": len(narrowed),
                # not "clock": merged into the node's manifest, it replaced the node's clock ("mono")
                "clock_mapping": {"method": "marker statement between two CLOCK_MONOTONIC reads",
                                  "start": self.clock_start, "end": self.clock_end}}
        return info
