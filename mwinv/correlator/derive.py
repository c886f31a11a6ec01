"""The derivation step: what is computed from a correlated capture's attribution, each table built once
in the capture's analysis session and written into the capture. The terminal and the report only read
them.

  model inputs       model_statement, model_attribution, model_statement_io (sql/model_*.sql: a cluster's
                     data-node parts as sub-statements of their coordinator statement) and the table
                     macros over them (model.MODEL_MACROS), built by the session's runner
  derive_model       statement_class (classify), and with a calibration statement_estimate, prediction
                     and disk_wait_check (model)
  derive_advice      statement_advice, advised_statement and statement_node_part for the report's top
                     ADVISED_TOP queries by total time and the statements a caller shows: a request of
                     the session (sql/advice_*.sql) per new set of statements, its rows appended

A table the capture already holds (open_correlated's views) is read as it is. A new correlation or
calibration makes them stale and removes them (load.remove_stale)."""

from __future__ import annotations

import shutil

import pyarrow as pa

from mwinv.capture.columns import table_from_rows
from mwinv.capture.tables import SCHEMAS, Capture
from mwinv.correlator.advice import Advice, advise_capture
from mwinv.correlator.classify import classify
from mwinv.correlator.load import CaptureDB, open_correlated, parts_view
from mwinv.correlator.model import MODEL_MACROS, disk_wait_check, estimate, model_frames, predict
from mwinv.correlator.nodes import NodePart, node_parts_from
from mwinv.correlator.pipeline import correlate, ranked_queries

MODEL_INPUTS = ("model_statement", "model_attribution", "model_statement_io", *MODEL_MACROS)
MODEL_TABLES = ("statement_class", "statement_estimate", "prediction", "disk_wait_check")
ADVICE_TABLES = ("statement_advice", "advised_statement", "statement_node_part")
ADVISED_TOP = 10   # the report's top list: always advised, so a report finds its statements' advice


def derive(db: CaptureDB, tables: tuple[str, ...] = MODEL_TABLES + ADVICE_TABLES, advise: list[int] = (),
           progress=None, write: bool = True) -> None:
    """Build `tables` (and what they need) in the session where the capture does not hold them yet, and
    write them into it (write=False: a node's own correlation, whose session is not the capture's: the
    parts go to the session's own directory). advise: statement ids to advise on beside the report's top
    queries."""
    step = progress or (lambda _: None)
    if not db.has("statement"):
        return
    db.build(*MODEL_INPUTS)
    if any(t in MODEL_TABLES for t in tables) and not db.modules.holds("statement_class"):
        derive_model(db, step, write)
    if any(t in ADVICE_TABLES for t in tables):
        derive_advice(db, advise, step, write)


def for_report(cap: Capture, top: int, progress=None, derive_all: bool = True,
               db: CaptureDB | None = None) -> tuple[CaptureDB, list[dict]]:
    """The session a report reads (db: mwinv-correlate's, else the capture's, correlated first when it
    was not) with everything derived for its `top` queries (derive_all=False: the capture's tables and
    the model's inputs only), and those queries."""
    if db is None:
        if cap.has("statement") and not cap.has("statement_attribution"):
            (progress or (lambda _: None))("correlating (the capture was not correlated yet)")
            db = correlate(cap.path, progress=progress)
        else:
            db = open_correlated(cap.path)
    queries = ranked_queries(db)[:top] if derive_all else []
    if derive_all:
        derive(db, advise=[q["example_id"] for q in queries], progress=progress)
    if db.has("statement"):
        db.build(*MODEL_INPUTS)
    return db, queries


def derive_model(db: CaptureDB, step, write: bool) -> None:
    """statement_class; with a calibration statement_estimate, prediction and disk_wait_check."""
    calibration = db.capture.manifest().get("calibration")
    kernel_functions = db.sql("SELECT * FROM statement_kernel_function").to_arrow_table() \
        if db.modules.holds("statement_kernel_function") else None
    n = db.sql("SELECT count(*) FROM model_statement").fetchone()[0]
    step(f"classifying {n:,} statements")
    out = {"statement_class": classify(db.con, kernel_functions)}
    if calibration:
        step("model estimates and what-if predictions")
        frames = model_frames(db.con)   # once for both
        out["statement_estimate"] = estimate(db.con, calibration, frames=frames)
        out["prediction"] = predict(db.con, calibration, frames=frames)
        check = disk_wait_check(db.con, calibration)
        out["disk_wait_check"] = table_from_rows(
            [{"requests": check.requests, "observed_s": check.observed_s, "calibrated_s": check.calibrated_s}]
            if check else [], SCHEMAS["disk_wait_check"])
    for table, rows in out.items():
        _append(db, table, rows, write)


def _append(db: CaptureDB, table: str, rows: pa.Table, write: bool) -> None:
    """Rows of a derived table as a new part (of the capture's table, or with write=False of the session's
    own directory), the session's view of the table reading all its parts: a derived table's rows are
    appended, never rewritten. Rows from Python become Arrow by columns.table_from_rows and reach DuckDB
    as Parquet: pa.array() and registering an Arrow table import pandas (seconds)."""
    into = db.capture if write else Capture(db.scratch)
    if write and not db.modules.holds(table):   # parts of another session's derivation: replaced
        shutil.rmtree(db.capture.table_dir(table), ignore_errors=True)
    into.write_part(table, rows, node="derived")
    folder = into.table_dir(table)
    if not db.modules.holds(table):
        db.con.execute(f"CREATE VIEW {table} AS SELECT * FROM {parts_view(folder)}")
        db.modules.provide(table)
        db.tables.add(table)


def derive_advice(db: CaptureDB, statement_ids: list[int], step, write: bool) -> None:
    """statement_advice and statement_node_part for the report's top ADVISED_TOP queries' longest executions
    and `statement_ids` not advised yet in this session or capture; advised_statement lists them."""
    wanted = {int(q["example_id"]) for q in ranked_queries(db)[:ADVISED_TOP]} | {int(i) for i in statement_ids}
    done = {r[0] for r in db.sql("SELECT statement_id FROM advised_statement").fetchall()} \
        if db.modules.holds("advised_statement") and db.modules.holds("statement_advice") else set()
    ids = sorted(wanted - done)
    if not ids:
        return
    step(f"advice for {len(ids)} statements")
    with db.modules.request(advice_ids=ids) as req:
        advice = advise_capture(db, ids, request=req)
        parts = db.sql("SELECT * FROM advice_node_part").to_arrow_table()
    rows = [{"statement_id": int(a.statement_id), "query_id": _int(a.query_id), "rule": a.rule, "advice": a.advice,
             "evidence": a.evidence, "expected_gain_ns": _int(a.expected_gain_ns), "basis": a.basis}
            for sid in ids for a in advice.get(sid, [])]
    _append(db, "statement_advice", table_from_rows(rows, SCHEMAS["statement_advice"]), write)
    _append(db, "advised_statement", table_from_rows([{"statement_id": i} for i in ids], SCHEMAS["advised_statement"]),
            write)
    _append(db, "statement_node_part", parts, write)


def _int(value) -> int | None:
    """A number of the rules (a numpy or float gain) as the integer its column holds."""
    return None if value is None else int(value)


def advice_of(db: CaptureDB, statement_ids: list[int]) -> dict[int, list[Advice]]:
    """The derived advice of these statements (derive_advice), in the order the rules gave it."""
    if not statement_ids or not db.modules.holds("statement_advice"):
        return {}
    out: dict[int, list[Advice]] = {}
    rows = db.sql(f"SELECT * FROM statement_advice WHERE statement_id IN ({', '.join(map(str, map(int, statement_ids)))})")
    for sid, qid, rule, text, evidence, gain, basis in rows.fetchall():
        out.setdefault(sid, []).append(Advice(sid, qid, rule, text, evidence, gain, basis))
    return out


def node_parts_of(db: CaptureDB, statement_ids: list[int]) -> dict[int, list[NodePart]]:
    """The derived parts on their data nodes of these statements (derive_advice), those that have some."""
    if not statement_ids or not db.modules.holds("statement_node_part"):
        return {}
    return node_parts_from(db.sql(f"""
        SELECT * FROM statement_node_part
        WHERE statement_id IN ({', '.join(map(str, map(int, statement_ids)))}) ORDER BY statement_id, node"""))
