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
from mwinv.correlator.load import CaptureDB, literal, open_correlated, sql_file
from mwinv.correlator.model import MODEL_MACROS, Platform, estimate_components, inputs_from, model_connection, model_total
from mwinv.correlator.modules import Modules
from mwinv.correlator.nodes import node_parts_from
from mwinv.engines.oracle.executions import fetch_calls
from mwinv.engines.oracle.profile import SQL_DIR as ORACLE_SQL
from mwinv.engines.registry import rules_for
from mwinv.fmt import duration
from mwinv.options import AdviceOptions
from mwinv.rules import MIN_LOCK_SHARE, MIN_RUN_QUEUE_SHARE, MIN_WALL_NS, Advice, Evidence, make_advice, what_ifs

BLOCKER_LOOKBACK_NS = 60_000_000_000  # a blocker's statement that took the lock started at most this long before


def advise(statements: pa.Table, attribution: pa.Table, statement_io: pa.Table | None = None,
           kernel_functions: pa.Table | None = None, statement_text: pa.Table | None = None,
           options: AdviceOptions | None = None, kernel_events: pa.Table | None = None,
           node_samples: pa.Table | None = None, only: list[int] | None = None,
           con: duckdb.DuckDBPyConnection | None = None, windows: str = "model_statement",
           node_parts: dict | None = None, dbms_evidence: dict[int, dict] | None = None) -> list[Advice]:
    """Advice for every root statement (or those in `only`). options: the capture's platform (calibration,
    CPUs, server settings; mwinv.options.AdviceOptions); node_samples: the nodes' CPU samples, which tell
    a CPU shortage from a capped process.
    kernel_events: the wake-ups that name a lock's holder (statement_blocker).
    con: a capture's session holding the advice's inputs (`advice_statement`, `advice_attribution`,
    `advice_statement_io`, `advice_lock_wakeup`: advise_capture's request; registering Arrow tables
    imports pandas), else they are registered on a connection of their own as the model's.
    windows: the table of the times the statements ran (see _idle_cpus); node_parts: a cluster
    statement's parts on its data nodes (nodes.NodePart), by statement id; dbms_evidence: the DBMS's
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
        con = _own_connection(statements, attribution, statement_io, kernel_events, node_samples)
    source = "model" if own_con else "advice"
    inputs = inputs_from(con, only, source)
    classes = class_shares(con, only, source)
    queued = [sid for sid, (shares, _, _) in classes.items() if shares["run_queue"] >= MIN_RUN_QUEUE_SHARE]
    idle = _idle_cpus(con, queued, windows) if queued else {}
    locked = [sid for sid, (shares, _, _) in classes.items() if shares["lock"] >= MIN_LOCK_SHARE]
    blockers = _blockers(con, source, locked) if locked else {}
    if own_con:
        con.close()
    ctx = _Context(texts, platform, blockers, options.cpus, options.settings, options.storage,
                   options.function_tracer)
    out: list[Advice] = []
    for sid, st in inputs.items():
        row = srow[sid]
        if not st["attributed"] or st["db_ns"] < MIN_WALL_NS:
            out.append(_too_thin(st, row))
            continue
        e = evidence_of(st, classes[sid], row, kfuncs.get(sid, []), idle.get(sid), (node_parts or {}).get(sid), ctx)
        e.dbms = (dbms_evidence or {}).get(sid) or {}
        # an engine's statements get its own rules (its settings and remedies)
        out.extend(advice for rule in rules_for(row.get("dbms")) if (advice := rule(e)) is not None)
    return out


def _own_connection(statements: pa.Table, attribution: pa.Table, statement_io: pa.Table | None,
                    kernel_events: pa.Table | None, node_samples: pa.Table | None) -> duckdb.DuckDBPyConnection:
    """A connection of advise()'s own holding its Arrow inputs as the model's, with the macros the
    advice reads (a statement stands for one execution where it does not say how many)."""
    if "executions" not in statements.column_names:
        statements = statements.append_column("executions", pa.array([1] * statements.num_rows, pa.int64()))
    con = model_connection(statements, attribution, statement_io)
    con.register("node_sample", node_samples if node_samples is not None else empty_table(SCHEMAS["node_sample"]))
    con.register("model_lock_wakeup", kernel_events if kernel_events is not None
                 else empty_table(SCHEMAS["kernel_event"]))
    con.execute(f"SET VARIABLE blocker_lookback_ns = {BLOCKER_LOOKBACK_NS}")
    con.execute(sql_file("statement_blocker"))
    return con


def _blockers(con: duckdb.DuckDBPyConnection, source: str, statement_ids: list[int]) -> dict[int, dict]:
    """statement_blocker's rows of these statements, by statement id."""
    cur = con.execute(f"SELECT * FROM statement_blocker({literal(source)}) "
                      f"WHERE statement_id IN ({', '.join(str(int(i)) for i in statement_ids)})")
    cols = [d[0] for d in cur.description]
    return {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}


# What the advice reads in a capture's session, built per request (sql/advice_*.sql: scope request)
ADVICE_INPUTS = ("advice_statement", "advice_attribution", "advice_statement_io", "advice_kernel_function",
                 "advice_window")


def advise_capture(capture: CaptureDB | str | os.PathLike, statement_ids: list[int],
                   request: Modules | None = None) -> dict[int, list[Advice]]:
    """Advice for a few statements of a correlated capture (the terminal's and the report's top ones),
    reading the rows they need rather than the whole capture. capture: the analysis session over it, or
    its directory (opened here); request: a request of that session (Modules.request with advice_ids =
    statement_ids) whose tables (sql/advice_*.sql: the statements' parts on their data nodes too) the
    caller reads after, else one of its own.

    An execution under MIN_WALL_NS is too short to advise on; when its query id ran more often (an OLTP
    statement), the advice is over all its executions: times, requests, rows and kernel samples summed,
    the example execution standing for them. Otherwise over the execution itself, with its workers and
    remote parts, and, when it waited for a lock, the other backends' statements around the wait and the
    wake-ups that name the blocker."""
    db = capture if isinstance(capture, CaptureDB) else open_correlated(capture)
    try:
        if not statement_ids or not db.has("statement") or not db.modules.holds("statement_attribution"):
            return {}
        if request is not None:
            advice = _advise_in_request(db, request, statement_ids)
        else:
            with db.modules.request(advice_ids=sorted(statement_ids)) as req:
                advice = _advise_in_request(db, req, statement_ids)
    finally:
        if db is not capture:
            db.con.close()
    out: dict[int, list[Advice]] = {}
    for a in advice:
        out.setdefault(a.statement_id, []).append(a)
    return out


def _advise_in_request(db: CaptureDB, req: Modules, statement_ids: list[int]) -> list[Advice]:
    con, cap = db.con, db.capture
    db.build(*MODEL_MACROS, "statement_blocker")
    req.build(*ADVICE_INPUTS, "advice_node_part")
    parts = node_parts_from(con.execute("SELECT * FROM advice_node_part ORDER BY statement_id, node"))
    # the wake-ups matter only to a lock wait (statement_blocker): no scan of the kernel events without one
    if con.execute("SELECT count(*) FROM advice_attribution WHERE component = 'lock_wait' AND ns > 0").fetchone()[0]:
        req.build("advice_lock_wakeup")
    dbms_evidence = None
    if cap.has("dbms_call") or cap.has("statement_stat"):
        req.build("dbms_wait_of")
        dbms_evidence = _dbms_evidence(con)

    def arrow(sql: str) -> pa.Table:
        return con.execute(sql).to_arrow_table()
    advice = advise(arrow("SELECT * FROM advice_statement"), arrow("SELECT * FROM advice_attribution"),
                    arrow("SELECT * FROM advice_statement_io"), arrow("SELECT * FROM advice_kernel_function"),
                    arrow("SELECT * FROM statement_text"), AdviceOptions.from_manifest(cap.manifest()),
                    only=statement_ids, con=con, windows="advice_window", node_parts=parts,
                    dbms_evidence=dbms_evidence)
    return advice


FETCH_ARRAY_WHAT_IF = 100  # the array size the fetch round-trip what-if tries


def _dbms_evidence(con: duckdb.DuckDBPyConnection) -> dict[int, dict]:
    """Per advised statement, the DBMS's own evidence (sql/dbms_evidence.sql, built), with the fetch round
    trips an array of FETCH_ARRAY_WHAT_IF rows would save, each at its node's base cost per trip (the
    Oracle engine's statement_trip: the bytes' part of a trip stays)."""
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
    for name in ("client_trip", "trip_cost", "statement_trip"):
        con.execute((ORACLE_SQL / f"{name}.sql").read_text())
    trips = con.execute("""
        WITH x AS (
            SELECT statement_id, count(*) FILTER (WHERE call = 'FETCH') AS f,
                   coalesce(sum(r) FILTER (WHERE call = 'FETCH'), 0) AS r
            FROM dbms_call GROUP BY statement_id)
        SELECT m.key, list(x.r ORDER BY m.statement_id), sum(x.f), sum(t.trips), sum(t.cost_ns), sum(t.bytes),
               avg(t.base_ns), avg(t.ns_per_byte)
        FROM advice_member m JOIN x USING (statement_id) LEFT JOIN statement_trip t USING (statement_id)
        GROUP BY m.key""").fetchall()
    for key, rows_each, fetches, n_trips, cost_ns, nbytes, base_ns, per_byte in trips:
        if key in out and fetches and n_trips:
            after = sum(fetch_calls(r or 0, FETCH_ARRAY_WHAT_IF) for r in rows_each)
            base = min(base_ns, cost_ns / n_trips)   # a trip's base, at most what its trips cost on the mean
            out[key].update(fetch_saved_ns=int(max(0, fetches - after) * base), fetch_size_to=FETCH_ARRAY_WHAT_IF,
                            fetch_base_ns=int(base), fetch_ns_per_byte=per_byte, fetch_bytes=int(nbytes))
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
    blockers: dict[int, dict]  # statement_blocker's rows of the statements that waited for a lock
    cpus: int
    settings: dict
    storage: dict
    function_tracer: dict


def _too_thin(st: dict, row: dict) -> Advice:
    why = "no attribution rows" if not st["attributed"] else f"{duration(st['db_ns'])} in the database < {duration(MIN_WALL_NS)}"
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
        blocker = _blocking_statement(row, ctx.blockers.get(st["statement_id"]), ctx.texts)
    return Evidence(
        statement_id=st["statement_id"], query_id=st["query_id"], db_ns=st["db_ns"],
        executions=row.get("executions") or 1, shares=shares, limit=limit, explained=explained,
        ns=st["attributed"], from_workers_ns=st["from_workers_ns"], **io, gains=gains,
        model_no_seq_ns=base["t_no_seq"] * 1e9 if base else None, model_net_ns=base["t_net"] * 1e9 if base else None,
        disk_rate_bps=platform.disk_rate_bps if platform else None,
        link_rate_bps=platform.link_rate_bps if platform else None,
        idle_cpus=idle_cpus, blocker=blocker, is_select=text.lstrip().lower().startswith(("select", "with")),
        pid=row["pid"], rows=row.get("rows") or 0, write_bytes=row.get("write_bytes") or 0,
        jit=str(ctx.settings.get("jit", "")).lower(), cpus=cpus, kernel_functions=kfuncs, parts=parts,
        storage=ctx.storage, function_tracer=ctx.function_tracer)


def _named(r: dict, texts: dict[int, str]) -> str:
    """'statement 12 (query_id 34: UPDATE accounts SET …)': a statement as a DBA recognises it."""
    text = " ".join((texts.get(r.get("query_text_hash")) or "").split())
    text = text if len(text) <= 60 else text[:59] + "…"
    return f"statement {r['statement_id']} (query_id {r['query_id']}" + (f": {text})" if text else ")")


def _blocking_statement(row: dict, blocker: dict | None, texts: dict[int, str]) -> str:
    """Who held the lock, in words, from the statement's row of sql/statement_blocker.sql: the backend
    that woke the waiter last, with the statements of its that took and released the lock, else the
    overlapping statement of another backend that ended last before the waiter went on."""
    if (row.get("executions") or 1) > 1:
        return (f"summed over its {row['executions']:,} executions, whose blockers may differ: an execution of "
                f"{duration(MIN_WALL_NS)} or more is advised on alone and names its own")
    b = blocker or {}
    if b.get("waker_pid") is not None:
        released = f"backend pid {b['waker_pid']} released it (woke it at +{(b['waker_ns'] - row['start_ns']) / 1e6:.0f} ms"
        released += f", with its {_named(b['released_with'], texts)})" if b["released_with"] else ")"
        if b["taken_by"]:
            return (f"{released}; it was taken by its {_named(b['taken_by'], texts)} or an earlier one of the same "
                    "transaction, which held it until then")
        return f"{released}; none of its statements before this wait was captured"
    if b.get("overlapping"):
        return (f"most likely {_named(b['overlapping'], texts)} of pid {b['overlapping']['pid']}, which started "
                "before and overlapped it (no wake-up by another backend to confirm)")
    return "the blocking statement was not captured (no other backend's statement overlaps the wait)"
