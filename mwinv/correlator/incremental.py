"""A capture correlated in parts (issue 33: a capture left on for hours, rotated, correlated as it grows).

`pipeline.correlate(..., until_ns=T)` walks the points up to T only, writes the derived rows of the
statements that are complete by then and keeps in `correlation_state/` what the rest needs; the next
correlation resumes from it, walks from T on, appends its own parts and, when it runs to the trace's
end, removes the state. The statements a part writes are those whose slice key (sql/slice_statement.sql)
lies below its statement cut S: S is the smallest key of a statement that ends after the earliest row
the walk carries past T (a pid's tail since its last switch), so every statement keyed below S has all
its segments counted. Kept between the parts:
- the walk's carry at T (per pid its context rows and its tail: a few rows each), node and label codes
  by name (a later part may add labels);
- the per-slice segment sums (seg_*_part) of the statements not written yet, added to the next part's;
- T, S and how many statements started before T: the walk gave the time before T to the statements
  it knew; a later part that brings a statement started before T (it was still running when the
  earlier part was correlated, and a capture writes a statement when it ends) is refused in one line,
  as the cut is to lie before every statement still running."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from mwinv import privfile
from mwinv.capture.tables import Capture
from mwinv.correlator.load import literal
from mwinv.errors import MwinvError

STATE_DIR = "correlation_state"
# the state's layout, written with it: a state another version of mwinv kept (its carry without a column
# the walk now reads) is refused in one line, not read
STATE_FORMAT = 2
# the walk's per-slice sums, each with its statement's node as a dbms_node code
SEEDED = ("seg_component_part", "seg_io_part", "seg_off_stack_part")


@dataclass
class Parts:
    """One correlation of a capture correlated in parts: where the earlier part stopped (since_ns: the
    walk's cut T; key_since: the statement cut S) and where this one stops (until_ns: None, the end)."""
    capture: Capture
    until_ns: int | None = None
    number: int = 0                              # parts written before this one
    since_ns: int | None = None
    key_since: int | None = None
    statements_before: int | None = None
    carry: pa.Table | None = None
    labels: dict = field(default_factory=dict)   # nodes, infos: the carry's codes
    key_until: int | None = None                 # S, once the walk has ended (walked)
    carry_out: dict | None = None
    labels_out: dict = field(default_factory=dict)

    @property
    def resumed(self) -> bool:
        return self.since_ns is not None

    @property
    def prefix(self) -> str:
        """Its derived tables' part names: a part that failed before the state was kept is written
        again under the same names, its files replaced (a whole correlation's: all)."""
        return f"part{self.number}" if self.resumed else "all"

    def carry_in(self, nodes: list[str], infos: list[str]) -> dict[str, np.ndarray] | None:
        """The earlier part's carry as the walk's columns, its codes those of this session's labels."""
        if self.carry is None or not self.carry.num_columns:
            return None
        cols = {c: self.carry[c].to_numpy(zero_copy_only=False) for c in self.carry.column_names}
        for col, now in (("node", nodes), ("info", infos)):
            then = self.labels[col]
            # the last entry: code -1 (none)
            cols[col] = np.array([now.index(v) for v in then] + [-1], np.int32)[cols[col]]
        return cols

    def walked(self, carry: dict[str, np.ndarray] | None, nodes: list[str], infos: list[str]) -> None:
        """The walk's carry at until_ns (None: it ran to the trace's end)."""
        self.carry_out = carry
        self.labels_out = {"node": nodes, "info": infos}


def load(capture: Capture, until_ns: int | None) -> Parts | None:
    """The parts' state of this capture for a correlation up to until_ns (None: none kept and no cut)."""
    d = capture.path / STATE_DIR
    if not (d / "state.json").exists():
        return Parts(capture, until_ns) if until_ns is not None else None
    remove = "remove it to correlate the capture whole"
    try:
        state = json.loads((d / "state.json").read_text())
        carry = pa.ipc.open_file(str(d / "carry.arrow")).read_all()
    except (OSError, ValueError, pa.ArrowInvalid) as exc:
        raise MwinvError(f"{d}: unreadable state of a correlation in parts ({exc}); {remove}") from None
    got = state.get("format", 1) if isinstance(state, dict) else None   # 1: kept without the field
    if got != STATE_FORMAT:
        raise MwinvError(f"{d}: state of a correlation in parts in format {got}, not {STATE_FORMAT} (kept by another "
                         f"version of mwinv); {remove}")
    if until_ns is not None and until_ns <= state["since_ns"]:
        raise MwinvError(f"until {until_ns}: not after the cut of the part correlated before ({state['since_ns']})")
    return Parts(capture, until_ns, state["parts"], state["since_ns"], state["key_until"], state["statements_before"],
                 carry, state["labels"])


def cut_ns(capture: Capture, seconds: float) -> int:
    """The trace time `seconds` after the capture's first statement started (`mwinv-correlate --until`)."""
    from mwinv.correlator.load import connect, read_parquet

    parts = capture.parts("statement")
    first = connect().execute(f"SELECT min(start_ns) FROM {read_parquet(parts)}").fetchone()[0] if parts else None
    if first is None:
        raise MwinvError(f"{capture.path}: no statements: nothing to correlate up to {seconds} s")
    return int(first) + round(seconds * 1e9)


def written_until(capture: Capture) -> int | None:
    """The statement cut of the last part written of a capture still being correlated in parts (its
    statements keyed from there on have no attribution yet), or None."""
    path = capture.path / STATE_DIR / "state.json"
    return json.loads(path.read_text())["key_until"] if path.exists() else None


def check(db, parts: Parts) -> None:
    """A later part brings no statement that started before the earlier part's cut."""
    n = statements_before(db, parts.since_ns)
    if n != parts.statements_before:
        raise MwinvError(f"{db.capture.path}: {n - parts.statements_before} statement(s) started before the cut at "
                         f"{parts.since_ns} ns that the part correlated before did not have (still running then); "
                         f"remove {db.capture.path / STATE_DIR} to correlate the capture whole")


def statements_before(db, ts: int) -> int:
    return db.sql(f"SELECT count(*) FROM statement_clean WHERE coalesce(nesting_level, 0) = 0 "
                  f"AND start_ns < {literal(int(ts))}").fetchone()[0]


def statement_cut(db, parts: Parts) -> int | None:
    """S: the smallest slice key of a statement ending after the earliest row carried past the cut (all
    statements keyed below it are complete); None when this part runs to the end."""
    if parts.until_ns is None:
        return None
    if parts.key_until is None:
        tail = parts.carry_out["ts"][~parts.carry_out["context"]] if parts.carry_out else np.zeros(0)
        first = int(tail.min()) if len(tail) else parts.until_ns
        (cut,) = db.sql(f"SELECT min(key_ns) FROM slice_statement WHERE end_ns > {literal(first)}").fetchone()
        parts.key_until = int(cut) if cut is not None else first + 1
    return parts.key_until


def seed(db, parts: Parts) -> dict[str, str]:
    """The earlier part's sums of the statements it left, as rows to add to this part's (Modules.seeds)."""
    out = {}
    for table in SEEDED:
        path = parts.capture.path / STATE_DIR / f"{table}.arrow"
        if parts.resumed and path.exists():
            db.con.register(f"earlier_{table}", pa.ipc.open_file(str(path)).read_all())
            out[table] = (f"SELECT n.code AS node, e.* EXCLUDE (node_name) FROM earlier_{table} e "
                          "JOIN dbms_node n ON n.node = e.node_name")
    return out


def key_filter(parts: Parts | None) -> str:
    """The statements this part writes: its slice keys' range as SQL over slice_statement.key_ns."""
    from mwinv.correlator.attribution import range_sql

    return range_sql("key_ns", parts.key_since, parts.key_until) if parts else "true"


def save(db, parts: Parts) -> None:
    """After this part's tables were written: the state the next part needs, or none after the last."""
    d = parts.capture.path / STATE_DIR
    if parts.until_ns is None:
        shutil.rmtree(d, ignore_errors=True)
        return
    privfile.make_dir(d)
    carry = pa.table(parts.carry_out or {})
    _write_arrow(d / "carry.arrow", carry)
    for table in SEEDED:
        _write_arrow(d / f"{table}.arrow", db.sql(
            f"SELECT n.node AS node_name, p.* EXCLUDE (node) FROM {table} p JOIN dbms_node n ON n.code = p.node "
            f"WHERE (n.node, p.statement_id) IN (SELECT (node, statement_id) FROM slice_statement "
            f"WHERE key_ns >= {int(parts.key_until)})").to_arrow_table())
    privfile.write(d / "state.json", json.dumps({
        "format": STATE_FORMAT, "parts": parts.number + 1, "since_ns": parts.until_ns, "key_until": parts.key_until,
        "labels": parts.labels_out, "statements_before": statements_before(db, parts.until_ns)}))


def _write_arrow(path, table: pa.Table) -> None:
    with privfile.replacing(path) as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
