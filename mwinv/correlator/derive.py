"""The derivation step: what is computed from a correlated capture's attribution, each table built by
one named step in the capture's analysis session and written into the capture once. The terminal and
the report only read them.

  model_inputs       schema `model`: statements, attribution, statement_io (a cluster's data-node parts
                     as sub-statements of their coordinator statement) and the model's views over them
  derive_model       statement_class (classify), and with a calibration statement_estimate, prediction
                     and disk_wait_check (model)
  derive_advice      statement_advice and advised_statement (advice.advise_capture), and on a cluster
                     statement_node_part (nodes.node_parts): the report's top ADVISED_TOP queries by
                     total time, and the statements a caller shows

A table asked for is built with what it needs; one the capture already holds (open_correlated's views)
is read as it is. A new correlation or calibration makes them stale and removes them (load.remove_stale)."""

from __future__ import annotations

import shutil
from contextlib import contextmanager

import pyarrow as pa

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, SCHEMAS
from mwinv.correlator.advice import Advice, advise_capture
from mwinv.correlator.classify import classify
from mwinv.correlator.load import CaptureDB, create_empty, literal, read_parquet, session_tables
from mwinv.correlator.model import add_model_views, disk_wait_check, estimate, model_frames, predict
from mwinv.correlator.nodes import NodePart, cluster_model_inputs, node_parts
from mwinv.correlator.pipeline import ranked_queries

MODEL_SCHEMA = "model"
MODEL_TABLES = ("statement_class", "statement_estimate", "prediction", "disk_wait_check")
ADVICE_TABLES = ("statement_advice", "advised_statement", "statement_node_part")
ADVISED_TOP = 10   # the report's top list: always advised, so a report finds its statements' advice


@contextmanager
def in_model(db: CaptureDB):
    """The session with the model's schema first on its search path (its names: model.model_connection's)."""
    db.con.execute(f"SET schema = '{MODEL_SCHEMA}'")
    try:
        yield db.con
    finally:
        db.con.execute("SET schema = 'main'")


def model_inputs(db: CaptureDB) -> None:
    """The schema `model`: the statements, their attribution and I/O as the model, the classifier and the
    report read them. A cluster's data-node statements linked to a coordinator statement become its
    sub-statements (nodes.cluster_model_inputs); elsewhere these are views of statement_clean,
    statement_attribution and statement_io."""
    if "statements" in session_tables(db, MODEL_SCHEMA):
        return
    db.con.execute(f"CREATE SCHEMA IF NOT EXISTS {MODEL_SCHEMA}")
    main = session_tables(db)
    for name, table in (("statement_clean", "statement"), ("statement_attribution", "statement_attribution"),
                        ("statement_io", "statement_io")):
        if name not in main:   # a capture without statements, or not correlated: no rows
            create_empty(db.con, table, "VIEW", name=name)
    if "statement_link" in main and db.sql("SELECT count(*) FROM main.statement_link").fetchone()[0]:
        cluster_model_inputs(db, MODEL_SCHEMA)
    else:
        for name, table in (("statements", "statement_clean"), ("attribution", "statement_attribution"),
                            ("statement_io", "statement_io")):
            db.con.execute(f"CREATE OR REPLACE VIEW {MODEL_SCHEMA}.{name} AS SELECT * FROM main.{table}")
    with in_model(db) as con:
        add_model_views(con)


def derive(db: CaptureDB, tables: tuple[str, ...] = MODEL_TABLES + ADVICE_TABLES, advise: list[int] = (),
           progress=None, write: bool = True) -> None:
    """Build `tables` (and what they need) in the session where the capture does not hold them yet, and
    write them into it (write=False: a node's own correlation, whose session is not the capture's).
    advise: statement ids to advise on beside the report's top queries."""
    step = progress or (lambda _: None)
    if not db.has("statement"):
        return
    model_inputs(db)
    have = session_tables(db)
    if any(t in MODEL_TABLES for t in tables) and "statement_class" not in have:
        derive_model(db, step, write)
    if any(t in ADVICE_TABLES for t in tables):
        derive_advice(db, advise, step, write)


def derive_model(db: CaptureDB, step, write: bool) -> None:
    """statement_class; with a calibration statement_estimate, prediction and disk_wait_check."""
    calibration = db.capture.manifest().get("calibration")
    kernel_functions = db.sql("SELECT * FROM statement_kernel_function").to_arrow_table() \
        if "statement_kernel_function" in session_tables(db) else None
    n = db.sql(f"SELECT count(*) FROM {MODEL_SCHEMA}.statements").fetchone()[0]
    step(f"classifying {n:,} statements")
    with in_model(db) as con:
        out = {"statement_class": classify(con, kernel_functions)}
        if calibration:
            step("model estimates and what-if predictions")
            frames = model_frames(con)   # once for both
            out["statement_estimate"] = estimate(con, calibration, frames=frames)
            out["prediction"] = predict(con, calibration, frames=frames)
            check = disk_wait_check(con, calibration)
            out["disk_wait_check"] = pa.Table.from_pylist(
                [{"requests": check.requests, "observed_s": check.observed_s, "calibrated_s": check.calibrated_s}]
                if check else [], schema=SCHEMAS["disk_wait_check"])
    for table, rows in out.items():
        _store(db, table, rows, write)


def _store(db: CaptureDB, table: str, rows: pa.Table | str, write: bool) -> None:
    """A derived table into the capture (replacing its earlier parts) and into the session as a view of
    what was written; rows: an Arrow table, or the name of a session table holding them."""
    db.con.execute(f"DROP VIEW IF EXISTS main.{table}")
    db.con.execute(f"DROP TABLE IF EXISTS main.{table}")
    if not write:   # the session only (an Arrow table registered: the report's path, not the terminal's)
        if isinstance(rows, pa.Table):
            db.con.register(f"{table}_rows", rows)
            rows = f"{table}_rows"
        db.con.execute(f"CREATE TABLE main.{table} AS SELECT * FROM {rows}")
        return
    shutil.rmtree(db.capture.table_dir(table), ignore_errors=True)
    # streamed (no other query on the connection until it is read)
    db.capture.write_part(table, rows if isinstance(rows, pa.Table) else
                          db.sql(f"SELECT * FROM {rows}").to_arrow_reader(1 << 20), node="derived")
    db.con.execute(f"CREATE VIEW main.{table} AS SELECT * FROM {read_parquet(db.capture.parts(table))}")
    db.tables.add(table)


def derive_advice(db: CaptureDB, statement_ids: list[int], step, write: bool) -> None:
    """statement_advice for the report's top ADVISED_TOP queries' longest executions and `statement_ids`
    (with those advised before), unless all of them have been; advised_statement lists them."""
    wanted = {int(q["example_id"]) for q in ranked_queries(db)[:ADVISED_TOP]} | {int(i) for i in statement_ids}
    have = session_tables(db)
    done = {r[0] for r in db.sql("SELECT statement_id FROM advised_statement").fetchall()} \
        if "advised_statement" in have and "statement_advice" in have else set()
    if wanted <= done:
        return
    ids = sorted(wanted | done)
    step(f"advice for {len(ids)} statements")
    parts = {sid: p for sid in ids if (p := node_parts(db, sid))} if "statement_link" in have else {}
    advice = advise_capture(db, ids, parts)
    # literals, not Arrow: registering an Arrow table imports pandas, which the terminal does not need
    values = ", ".join(
        f"({int(a.statement_id)}, {literal(_int(a.query_id))}, {literal(a.rule)}, {literal(a.advice)}, "
        f"{literal(a.evidence)}, {literal(_int(a.expected_gain_ns))}, {literal(a.basis)})"
        for sid in ids for a in advice.get(sid, []))
    create_empty(db.con, "statement_advice", "TABLE", name="advice_rows")
    if values:
        db.con.execute(f"INSERT INTO advice_rows VALUES {values}")
    db.con.execute(f"CREATE OR REPLACE TABLE advised_rows AS SELECT unnest([{', '.join(map(str, ids))}])::BIGINT "
                   "AS statement_id")
    create_empty(db.con, "statement_node_part", "TABLE", name="part_rows")
    values = ", ".join(
        f"({int(sid)}, {literal(p.node)}, {p.statements}, {p.fetches}, {p.rows}, {p.sent_bytes}, {p.execution_ns}, "
        f"{p.idle_ns}, {p.first_start_ns}, {p.last_end_ns}, {str(p.critical).lower()}, "
        + ", ".join(str(int(p.components.get(c, 0))) for c in ATTRIBUTION_COMPONENTS) + ")"
        for sid, node_list in parts.items() for p in node_list)
    if values:
        db.con.execute(f"INSERT INTO part_rows VALUES {values}")
    _store(db, "statement_advice", "advice_rows", write)
    _store(db, "advised_statement", "advised_rows", write)
    _store(db, "statement_node_part", "part_rows", write)
    db.con.execute("DROP TABLE advice_rows; DROP TABLE advised_rows; DROP TABLE part_rows")


def _int(value) -> int | None:
    """A number of the rules (a numpy or float gain) as the integer its column holds."""
    return None if value is None else int(value)


def advice_of(db: CaptureDB, statement_ids: list[int]) -> dict[int, list[Advice]]:
    """The derived advice of these statements (derive_advice), in the order the rules gave it."""
    if not statement_ids or "statement_advice" not in session_tables(db):
        return {}
    out: dict[int, list[Advice]] = {}
    rows = db.sql(f"SELECT * FROM statement_advice WHERE statement_id IN ({', '.join(map(str, map(int, statement_ids)))})")
    for sid, qid, rule, text, evidence, gain, basis in rows.fetchall():
        out.setdefault(sid, []).append(Advice(sid, qid, rule, text, evidence, gain, basis))
    return out


def node_parts_of(db: CaptureDB, statement_ids: list[int]) -> dict[int, list[NodePart]]:
    """The derived parts on their data nodes of these statements (derive_advice), those that have some."""
    if not statement_ids or "statement_node_part" not in session_tables(db):
        return {}
    out: dict[int, list[NodePart]] = {}
    comps = ", ".join(f"{c}_ns" for c in ATTRIBUTION_COMPONENTS)
    for sid, node, n, fetches, rows, sent, execution, idle, first, last, critical, *ns in db.sql(f"""
            SELECT statement_id, node, statements, fetches, rows, sent_bytes, execution_ns, idle_ns, first_start_ns,
                   last_end_ns, critical, {comps} FROM statement_node_part
            WHERE statement_id IN ({', '.join(map(str, map(int, statement_ids)))}) ORDER BY statement_id, node""").fetchall():
        out.setdefault(sid, []).append(NodePart(node, n, fetches, rows, sent, execution, idle,
                                                dict(zip(ATTRIBUTION_COMPONENTS, ns)), first, last, critical))
    return out
