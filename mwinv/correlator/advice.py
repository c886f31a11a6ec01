"""Tuning advice: an engine's rules (rules_for) over one statement's evidence (class shares, I/O counts, kernel
hot spots, text) and the model's expected gain. A rule fires only on evidence it names; a statement with
too little data gets one "data too thin" note instead of guesses. This module gathers the evidence.

The expected gain of a rule is the wall time the model's what-if (model.predict) would remove,
e.g. "CPU 3x" for three parallel processes; where the gain is "all of the component" (e.g. a
working set that would fit in memory) the rule says so. Kernel hot spot rules follow [Tanigawa] (docs/references.md):
name the sysctl and why."""

from __future__ import annotations

import os
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from mwinv.capture.columns import empty_table
from mwinv.capture.tables import SCHEMAS
from mwinv.correlator.classify import class_shares, ranked_kernel_functions
from mwinv.correlator.load import CaptureDB, create_empty, open_correlated, session_tables, sql_file
from mwinv.correlator.model import (Platform, add_model_views, estimate_components, inputs_from, model_connection,
                                   model_total)
from mwinv.correlator.nodes import node_parts
from mwinv.engines.oracle.executions import fetch_calls
from mwinv.engines.registry import rules_for
from mwinv.fmt import ms_text as _ms
from mwinv.options import AdviceOptions
from mwinv.rules import MIN_LOCK_SHARE, MIN_RUN_QUEUE_SHARE, MIN_WALL_NS, Advice, Evidence, make_advice, what_ifs

BLOCKER_LOOKBACK_NS = 60_000_000_000  # a blocker's statement that took the lock started at most this long before


def advise(statements: pa.Table, attribution: pa.Table, statement_io: pa.Table | None = None,
           kernel_functions: pa.Table | None = None, statement_text: pa.Table | None = None,
           options: AdviceOptions | None = None, kernel_events: pa.Table | None = None,
           node_samples: pa.Table | None = None, only: list[int] | None = None,
           con: duckdb.DuckDBPyConnection | None = None, windows: str = "statements",
           node_parts: dict | None = None, dbms_evidence: dict[int, dict] | None = None) -> list[Advice]:
    """Advice for every root statement (or those in `only`). options: the capture's platform (calibration,
    CPUs, server settings; mwinv.options.AdviceOptions); node_samples: the nodes' CPU samples, which tell
    a CPU shortage from a capped process.
    con: a connection that already holds these as `statements`, `attribution`, `statement_io` and
    `node_sample` (advise_capture reads them from Parquet: registering Arrow tables imports pandas).
    windows: the table of the times the statements ran (see _idle_cpus); node_parts: a cluster
    statement's parts on its data nodes (nodes.node_parts), by statement id; dbms_evidence: the DBMS's
    own account of a statement (Oracle's trace), by statement id: its engine's rules advise on it."""
    options = options or AdviceOptions()
    platform = None
    if options.calibration and "disk" in options.calibration:
        platform = Platform.from_calibration(options.calibration)
    texts = {}
    if statement_text is not None:
        texts = dict(zip(statement_text.column("query_text_hash").to_pylist(), statement_text.column("text").to_pylist()))
    wanted = set(only) if only is not None else None
    srow = {r["statement_id"]: r for r in statements.to_pylist() if wanted is None or r["statement_id"] in wanted}
    kfuncs = ranked_kernel_functions(kernel_functions)  # only sources with samples enough to rank
    own_con = con is None
    if own_con:
        con = model_connection(statements, attribution, statement_io)
        con.register("node_sample", node_samples if node_samples is not None else empty_table(SCHEMAS["node_sample"]))
    else:
        add_model_views(con)
    inputs = inputs_from(con, only)
    classes = class_shares(con, only)
    queued = [sid for sid, (shares, _, _) in classes.items() if shares["run_queue"] >= MIN_RUN_QUEUE_SHARE]
    idle = _idle_cpus(con, queued, windows) if queued else {}
    if own_con:
        con.close()
    ctx = _Context(texts, platform, statements, kernel_events, options.cpus, options.settings)
    out: list[Advice] = []
    for sid, st in inputs.items():
        row = srow[sid]
        if not st["attributed"] or st["wall_ns"] < MIN_WALL_NS:
            out.append(_too_thin(st, row))
            continue
        e = evidence_of(st, classes[sid], row, kfuncs.get(sid, []), idle.get(sid), (node_parts or {}).get(sid), ctx)
        e.dbms = (dbms_evidence or {}).get(sid) or {}
        # an engine's statements get its own rules (its settings and remedies)
        out.extend(advice for rule in rules_for(row.get("dbms")) if (advice := rule(e)) is not None)
    return out


LOCK_WAKEUPS_SQL = """
    SELECT k.* FROM kernel_event k
    WHERE (k.event LIKE '%sched_waking' OR k.event LIKE '%sched_wakeup') AND k.target_pid IN (
        SELECT s.pid FROM statements s JOIN attribution a USING (statement_id)
        WHERE a.component = 'lock_wait' AND a.ns > 0)"""


def advise_capture(capture: CaptureDB | str | os.PathLike, statement_ids: list[int],
                   parts: dict[int, list] | None = None) -> dict[int, list[Advice]]:
    """Advice for a few statements of a correlated capture (the terminal's and the report's top ones),
    reading the rows they need rather than the whole capture. capture: the analysis session over it
    (its tables are read where they are; the advice's own live in a schema `advice`, dropped after),
    or its directory (opened here).

    An execution under MIN_WALL_NS is too short to advise on; when its query id ran more often (an OLTP
    statement), the advice is over all its executions: times, requests, rows and kernel samples summed,
    the example execution standing for them. Otherwise over the execution itself, with its workers and
    remote parts, and, when it waited for a lock, the other backends' statements around the wait and the
    wake-ups that name the blocker. parts: the statements' parts on their data nodes (nodes.node_parts),
    when the caller has them already."""
    db = capture if isinstance(capture, CaptureDB) else open_correlated(capture)
    try:
        have = session_tables(db)
        if not statement_ids or not db.has("statement") or "statement_attribution" not in have:
            return {}
        if parts is None:
            parts = ({sid: p for sid in statement_ids if (p := node_parts(db, sid))}
                     if "statement_link" in have else {})
        db.con.execute("DROP SCHEMA IF EXISTS advice CASCADE")
        db.con.execute("CREATE SCHEMA advice")
        db.con.execute("SET schema = 'advice'")
        try:
            advice = _advise_in_session(db, statement_ids, have, parts)
        finally:
            db.con.execute("SET schema = 'main'")
            db.con.execute("DROP SCHEMA advice CASCADE")
    finally:
        if db is not capture:
            db.con.close()
    out: dict[int, list[Advice]] = {}
    for a in advice:
        out.setdefault(a.statement_id, []).append(a)
    return out


def _advise_in_session(db: CaptureDB, statement_ids: list[int], have: set[str], parts: dict) -> list[Advice]:
    con, cap = db.con, db.capture
    manifest = cap.manifest()
    derived = {}   # the derived tables advice reads: the session's, or empty where none was derived
    for table in ("statement_kernel_function", "statement_io"):
        derived[table] = f"main.{table}"
        if table not in have:
            derived[table] = f"absent_{table}"
            create_empty(con, table, "VIEW", name=derived[table])
    kfuncs, io = derived["statement_kernel_function"], derived["statement_io"]
    con.execute(f"""
        CREATE TABLE example AS
        SELECT * FROM main.statement WHERE statement_id IN ({", ".join(str(int(i)) for i in statement_ids)})""")
    # each example stands for itself, or (too short) for all root executions of its query id: in a
    # duty-cycled capture those a window covered (the others' time is rusage or not_allocated)
    traced = (" AND s.statement_id IN (SELECT statement_id FROM main.traced_statement)"
              if db.duty_cycled and "traced_statement" in have else "")
    con.execute(f"""
        CREATE TABLE member AS
        SELECT statement_id AS key, statement_id FROM example
        UNION
        SELECT e.statement_id, s.statement_id FROM example e JOIN main.statement s ON s.query_id = e.query_id
        WHERE e.end_ns - e.start_ns < {MIN_WALL_NS} AND s.parent_statement_id IS NULL{traced}""")
    con.execute(f"""
        CREATE TABLE statements AS
        WITH g AS (
            SELECT m.key, count(*) AS executions, sum(s.end_ns - s.start_ns)::BIGINT AS wall_ns,
                   sum(s.rows)::BIGINT AS rows, sum(s.write_bytes)::BIGINT AS write_bytes
            FROM member m JOIN main.statement s USING (statement_id) GROUP BY m.key),
        locked AS (  -- the single executions that waited for a lock
            SELECT e.node, e.start_ns, e.end_ns FROM example e JOIN g ON g.key = e.statement_id AND g.executions = 1
            JOIN main.statement_attribution a USING (statement_id)
            WHERE a.component = 'lock_wait' AND a.ns >= {MIN_LOCK_SHARE} * (e.end_ns - e.start_ns))
        SELECT e.* REPLACE (e.start_ns + g.wall_ns AS end_ns, g.rows AS rows, g.write_bytes AS write_bytes),
               g.executions
        FROM example e JOIN g ON g.key = e.statement_id
        UNION ALL BY NAME  -- the executions' parallel workers and remote parts, under their example
        SELECT w.* REPLACE (m.key AS parent_statement_id), 1 AS executions
        FROM main.statement w JOIN member m ON w.parent_statement_id = m.statement_id
        UNION ALL BY NAME  -- other backends' statements around a lock wait
        SELECT DISTINCT s.*, 1 AS executions FROM main.statement s JOIN locked l
            ON s.node = l.node AND s.start_ns < l.end_ns AND s.end_ns > l.start_ns - {BLOCKER_LOOKBACK_NS}
        WHERE s.statement_id NOT IN (SELECT statement_id FROM member)""")
    con.execute("""
        CREATE TABLE attribution AS
        SELECT any_value(a.node) AS node, m.key AS statement_id, any_value(a.query_id) AS query_id, a.component,
               sum(a.ns)::BIGINT AS ns, sum(a.from_workers_ns)::BIGINT AS from_workers_ns
        FROM main.statement_attribution a JOIN member m USING (statement_id) GROUP BY m.key, a.component""")
    # the executions' requests summed, their workers' and remote parts' as they are
    sums = ", ".join(f"sum({c})::BIGINT AS {c}" for c in ("seq_bytes", "seq_reqs", "random_reqs", "random_bytes",
                                                          "net_rx_bytes", "net_tx_bytes"))
    con.execute(f"""
        CREATE TABLE statement_io AS
        SELECT i.node, m.key AS statement_id, {sums}
        FROM {io} i JOIN member m USING (statement_id) GROUP BY i.node, m.key
        UNION ALL BY NAME
        SELECT i.* FROM {io} i JOIN statements s USING (statement_id)
        WHERE s.parent_statement_id IN (SELECT key FROM member)""")
    con.execute(f"""
        CREATE TABLE kernel_function_of AS
        SELECT any_value(k.node) AS node, m.key AS statement_id, any_value(k.query_id) AS query_id, k.function,
               any_value(k.stack) AS stack, sum(k.samples)::BIGINT AS samples, sum(k.ns)::BIGINT AS ns,
               sum(k.ns) / sum(sum(k.ns)) OVER (PARTITION BY m.key, k.source) AS share, k.source
        FROM {kfuncs} k JOIN member m USING (statement_id) GROUP BY m.key, k.source, k.function""")
    # the CPU samples overlapping the executions themselves tell whether CPUs stood idle
    con.execute("""
        CREATE TABLE windows AS
        SELECT m.key AS statement_id, s.node, s.start_ns, s.end_ns FROM member m JOIN main.statement s USING (statement_id)""")

    dbms_evidence = _dbms_evidence(con) if cap.has("dbms_call") or cap.has("statement_stat") else None

    def arrow(sql: str) -> pa.Table:
        return con.execute(sql).to_arrow_table()
    return advise(arrow("SELECT * FROM statements"), arrow("SELECT * FROM attribution"),
                  arrow("SELECT * FROM statement_io"), arrow("SELECT * FROM kernel_function_of"),
                  arrow("SELECT * FROM main.statement_text"), AdviceOptions.from_manifest(manifest),
                  # the wake-ups matter only to a lock wait: no scan of the kernel events without one
                  kernel_events=arrow(LOCK_WAKEUPS_SQL) if con.execute(
                      "SELECT count(*) FROM attribution WHERE component = 'lock_wait' AND ns > 0").fetchone()[0]
                  else None, node_samples=arrow("SELECT * FROM main.node_sample"),
                  only=statement_ids, con=con, windows="windows", node_parts=parts,
                  dbms_evidence=dbms_evidence)


FETCH_ARRAY_WHAT_IF = 100  # the array size the fetch round-trip what-if tries


def _dbms_evidence(con: duckdb.DuckDBPyConnection) -> dict[int, dict]:
    """Per advised statement, the DBMS's own evidence (sql/dbms_evidence.sql), with the fetch round
    trips an array of FETCH_ARRAY_WHAT_IF rows would save at its mean client wait per trip."""
    con.execute(sql_file("dbms_evidence"))
    out: dict[int, dict] = {}
    for key, event, comp, ns, count, obj, obj_ns, op in con.execute(
            "SELECT * FROM dbms_wait_of ORDER BY key, ns DESC, event, obj_ns DESC").fetchall():
        waits = out.setdefault(key, {"waits": []})["waits"]
        if not waits or waits[-1]["event"] != event:
            waits.append({"event": event, "component": comp, "ns": int(ns), "count": int(count), "objects": []})
        if obj is not None and obj > 0:
            waits[-1]["objects"].append({"obj": int(obj), "ns": int(obj_ns), "operation": op})
    for key, parses, hard, parse_ns, execs, fetches, rows, commits, variants in con.execute(
            "SELECT * FROM dbms_call_of").fetchall():
        out.setdefault(key, {"waits": []}).update(parses=parses, hard_parses=int(hard), parse_ns=int(parse_ns),
                                                  execs=execs, fetches=fetches, rows=int(rows), commits=commits,
                                                  variants=variants or 1)
    for key, name, value in con.execute("SELECT * FROM dbms_stat_of").fetchall():
        out.setdefault(key, {"waits": []}).setdefault("stats", {})[name] = int(value)
    trips = con.execute("""
        SELECT m.key, list(r ORDER BY m.statement_id), sum(f), sum(w) FROM member m JOIN (
            SELECT c.statement_id, count(*) FILTER (WHERE c.call = 'FETCH') AS f,
                   coalesce(sum(c.r) FILTER (WHERE c.call = 'FETCH'), 0) AS r,
                   (SELECT coalesce(sum(w.ela_ns), 0) FROM dbms_wait w JOIN statement s ON s.node = w.node
                    AND s.statement_id = c.statement_id AND w.statement_id = s.statement_id
                    WHERE w.event = 'SQL*Net message from client' AND w.end_ns > s.start_ns
                      AND w.end_ns <= s.end_ns) AS w
            FROM dbms_call c GROUP BY c.statement_id) x USING (statement_id)
        GROUP BY m.key""").fetchall()
    for key, rows_each, fetches, wait_ns in trips:
        if key in out and fetches:
            after = sum(fetch_calls(r or 0, FETCH_ARRAY_WHAT_IF) for r in rows_each)
            per_trip = wait_ns / max(fetches - len(rows_each), 1)
            out[key].update(fetch_saved_ns=int(max(0, fetches - after) * per_trip), fetch_size_to=FETCH_ARRAY_WHAT_IF)
    return out


def _idle_cpus(con: duckdb.DuckDBPyConnection, statement_ids: list[int], windows: str = "statements") -> dict[int, float]:
    """The mean number of idle CPUs on each statement's node while it ran (idle and iowait time of the
    samples overlapping the statement, each weighted by its overlap). windows: a table of (statement_id,
    node, start_ns, end_ns), several rows for a statement that stands for several executions."""
    rows = con.execute(f"""
        WITH o AS (
            SELECT s.statement_id, n.cpu_idle_ns + coalesce(n.cpu_iowait_ns, 0) AS idle_ns, n.interval_ns,
                   least(n.ts_ns, s.end_ns) - greatest(n.ts_ns - n.interval_ns, s.start_ns) AS overlap_ns
            FROM {windows} s
            JOIN node_sample n ON n.node = s.node AND n.ts_ns > s.start_ns AND n.ts_ns - n.interval_ns < s.end_ns
            WHERE n.interval_ns > 0 AND n.cpu_idle_ns IS NOT NULL  -- the CPU rows (disk and net rows have none)
              AND s.statement_id IN ({", ".join(map(str, statement_ids))}))
        SELECT statement_id, sum(idle_ns * overlap_ns / interval_ns) / sum(overlap_ns) FROM o GROUP BY 1""").fetchall()
    return {sid: float(v) for sid, v in rows if v is not None}


@dataclass
class _Context:
    """What every statement's evidence draws on from the capture."""
    texts: dict[int, str]  # statement text by query_text_hash
    platform: Platform | None  # the calibrated model; None without a calibration
    statements: pa.Table  # all statements: the lock holder is looked for among them
    kernel_events: pa.Table | None  # the wake-ups that name a lock holder
    cpus: int
    settings: dict


def _too_thin(st: dict, row: dict) -> Advice:
    why = "no attribution rows" if not st["attributed"] else f"wall time {_ms(st['wall_ns'])} < {_ms(MIN_WALL_NS)}"
    return make_advice(st["statement_id"], st["query_id"], row.get("executions") or 1, "too-thin",
                       "no advice: the data is too thin to tell what limits this statement",
                       why + "; the shares rest on too few events or samples")


def evidence_of(st: dict, cls: tuple[dict[str, float], str, float], row: dict, kfuncs: list[dict],
                idle_cpus: float | None, parts: list | None, ctx: _Context) -> Evidence:
    """One statement's evidence for the rules: st is model.inputs_from's entry, cls classify.class_shares',
    row its statements row; the model runs once per what-if, the lock holder is looked for only when the
    lock wait is worth a word."""
    shares, limit, explained = cls
    io = {k: sum(n[k] for n in st["nodes"]) for k in ("seq_bytes", "random_reqs", "random_bytes", "net_bytes")}
    gains: dict[tuple[str, float], int | None] = {}
    base = None
    platform, cpus = ctx.platform, ctx.cpus
    if platform is not None:
        base = estimate_components(st["nodes"], platform)
        total = model_total(base)
        for what_if, k in what_ifs(cpus):
            gains[(what_if, k)] = round((total - model_total(estimate_components(st["nodes"],
                                                                              platform.scaled(what_if, k)))) * 1e9)
    text = ctx.texts.get(row.get("query_text_hash")) or ""
    blocker = None
    if shares["lock"] >= MIN_LOCK_SHARE:
        blocker = _blocking_statement(row, ctx.statements, ctx.kernel_events, ctx.texts)
    return Evidence(
        statement_id=st["statement_id"], query_id=st["query_id"], wall_ns=st["wall_ns"],
        executions=row.get("executions") or 1, shares=shares, limit=limit, explained=explained,
        ns=st["attributed"], from_workers_ns=st["from_workers_ns"], **io, gains=gains,
        model_no_seq_ns=base["t_no_seq"] * 1e9 if base else None, model_net_ns=base["t_net"] * 1e9 if base else None,
        disk_rate_bps=platform.disk_rate_bps if platform else None,
        link_rate_bps=platform.link_rate_bps if platform else None,
        idle_cpus=idle_cpus, blocker=blocker, is_select=text.lstrip().lower().startswith(("select", "with")),
        pid=row["pid"], rows=row.get("rows") or 0, write_bytes=row.get("write_bytes") or 0,
        jit=str(ctx.settings.get("jit", "")).lower(), cpus=cpus, kernel_functions=kfuncs, parts=parts)


def _named(r: dict, texts: dict[int, str]) -> str:
    """'statement 12 (query_id 34: UPDATE accounts SET …)': a statement as a DBA recognises it."""
    text = " ".join((texts.get(r.get("query_text_hash")) or "").split())
    text = text if len(text) <= 60 else text[:59] + "…"
    return f"statement {r['statement_id']} (query_id {r['query_id']}" + (f": {text})" if text else ")")


def _blocking_statement(row: dict, statements: pa.Table, kernel_events: pa.Table | None, texts: dict[int, str]) -> str:
    """Who held the lock: the backend that woke the waiter last (sched_waking, in the waker's context;
    else sched_wakeup, whose pid is the waker's only when both ran on one CPU), else the overlapping
    statement of another backend that ended last before the waiter went on. Wake-ups from other contexts
    (pid 0: interrupts, timers such as deadlock_timeout's) are not lock releases."""
    if (row.get("executions") or 1) > 1:
        return (f"summed over its {row['executions']:,} executions, whose blockers may differ: an execution of "
                f"{_ms(MIN_WALL_NS)} or more is advised on alone and names its own")
    start, end, pid, node = row["start_ns"], row["end_ns"], row["pid"], row["node"]
    all_rows = [r for r in statements.to_pylist() if r["node"] == node]
    backends = {r["pid"] for r in all_rows} - {pid}
    others = [r for r in all_rows if r["pid"] != pid and r["start_ns"] < end and r["end_ns"] > start - BLOCKER_LOOKBACK_NS]
    waker = None
    if kernel_events is not None and kernel_events.num_rows:
        wakes = [r for r in kernel_events.to_pylist()
                 if (r["event"] or "").endswith(("sched_waking", "sched_wakeup")) and r["target_pid"] == pid
                 and start <= r["ts_ns"] <= end
                 and r["pid"] in backends and r["node"] == node]
        if wakes:
            waker = max(wakes, key=lambda r: r["ts_ns"])
    if waker:
        theirs = [r for r in others if r["pid"] == waker["pid"]]
        # the lock was taken before this statement started to wait; it is released by a later statement
        # of the same transaction (COMMIT, ROLLBACK: PostgreSQL releases the locks just after the
        # statement's own end) or at the end of the holder's own
        before = [r for r in theirs if r["start_ns"] <= start]
        later = [r for r in theirs if start < r["start_ns"] <= waker["ts_ns"]]
        released = f"backend pid {waker['pid']} released it (woke it at +{(waker['ts_ns'] - start) / 1e6:.0f} ms"
        released += f", with its {_named(max(later, key=lambda r: r['start_ns']), texts)})" if later else ")"
        if before:
            b = max(before, key=lambda r: r["start_ns"])
            return (f"{released}; it was taken by its {_named(b, texts)} or an earlier one of the same transaction, "
                    "which held it until then")
        return f"{released}; none of its statements before this wait was captured"
    overlapping = [r for r in others if r["start_ns"] <= start]
    if overlapping:
        b = max(overlapping, key=lambda r: r["end_ns"])
        return (f"most likely {_named(b, texts)} of pid {b['pid']}, which started before and overlapped it "
                "(no wake-up by another backend to confirm)")
    return "the blocking statement was not captured (no other backend's statement overlaps the wait)"
