"""The Python API (docs/python.md): a capture's derived tables as pandas DataFrames, for notebooks.

    import mwinv
    cap = mwinv.open("out/run1")          # correlated on first use, as mwinv-correlate does
    cap.top_sql(5, by="disk")

Every method reads what the terminal and the report read (pipeline.top_statements, derive.advice_of,
the derived tables), so the three cannot disagree. pandas is imported by the methods that return a
DataFrame, never by `import mwinv` (the command line does not load it: ~0.4 s)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS, SCHEMAS, Capture as CaptureDir
from mwinv.correlator import derive
from mwinv.correlator.load import CaptureDB, literal, open_correlated
from mwinv.correlator.pipeline import RANK_BY, correlate, top_statements
from mwinv.correlator.terminal import ranked_advice
from mwinv.errors import MwinvError


def _frame(records: list[dict], columns: list[str] | None = None):
    import pandas as pd

    return pd.DataFrame.from_records(records, columns=columns)


class Capture:
    """One capture directory's analysis session (DuckDB), correlated. Use as a context manager or call
    close(); the DataFrames it returned stay valid after."""

    def __init__(self, db: CaptureDB):
        self.db = db
        self.path: Path = db.capture.path
        self.warnings: list[str] = list(db.warnings)   # what mwinv-correlate prints as "warning:"

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.db.con.close()

    def __repr__(self) -> str:
        return f"<mwinv.Capture {str(self.path)!r}>"

    @property
    def manifest(self) -> dict:
        return self.db.capture.manifest()

    def top_sql(self, n: int = 10, by: str = "total", query_id: int | None = None):
        """mwinv-correlate's top list: one row per query id (executions without one stand alone), ranked
        by `by` (RANK_BY: total, cpu, disk, network, remote, lock, run_queue, other, client_wait,
        not_allocated). Columns: rank, query_id, text, nodes, calls, traced_calls, total_ns, one <component>_ns
        per component, from_workers_ns, example_id (the longest execution) and kernel_functions
        [(function, share, source)]."""
        rows = top_statements(self.db, n=n, by=by, query_id=query_id)
        records = []
        for i, s in enumerate(rows, 1):
            d = asdict(s)
            comps = d.pop("components")
            records.append({"rank": i, **d, **{f"{c}_ns": comps[c] for c in ATTRIBUTION_COMPONENTS}})
        cols = ["rank", "query_id", "text", "nodes", "calls", "traced_calls", "total_ns",
                *(f"{c}_ns" for c in ATTRIBUTION_COMPONENTS), "from_workers_ns", "example_id", "kernel_functions"]
        return _frame(records, cols)

    def statements(self):
        """Every execution kept for analysis (the derived statement_clean: excluded rows are in
        `warnings`), with its text: node, statement_id, pid, query_id, start_ns, end_ns, ..."""
        return self.sql("""
            SELECT s.*, t.text FROM statement_clean s
            LEFT JOIN (SELECT query_text_hash, any_value(text) AS text FROM statement_text GROUP BY 1) t
                USING (query_text_hash)
            ORDER BY s.node, s.start_ns, s.statement_id""" if self.db.has("statement_text") else
                        "SELECT *, NULL AS text FROM statement_clean ORDER BY node, start_ns, statement_id")

    def attribution(self, query_id: int | None = None, statement_id: int | None = None):
        """statement_attribution: per top-level statement and component the ns of its wall time (they sum
        to end_ns - start_ns; a component of 0 has no row), of one query id or one statement if asked. Long
        form: pivot with `df.pivot_table(index="statement_id", columns="component", values="ns", fill_value=0)`."""
        where = []
        if query_id is not None:
            where.append(f"query_id = {literal(int(query_id))}")
        if statement_id is not None:
            where.append(f"statement_id = {literal(int(statement_id))}")
        return self._table("statement_attribution", where, "node, statement_id, component")

    def kernel_functions(self, query_id: int, limit: int = 10):
        """A query's hot kernel functions, as the terminal lists them: function, share (of that
        source's time), source (perf samples or wait stacks)."""
        rows = top_statements(self.db, n=1, by="total", query_id=query_id, functions_per_statement=limit)
        if not rows:
            raise MwinvError(f"{self.path}: no statement with query_id {query_id}")
        return _frame([{"function": f, "share": share, "source": src} for f, share, src in rows[0].kernel_functions],
                      ["function", "share", "source"])

    def advice(self, query_id: int | None = None):
        """What to change, as mwinv-correlate and the report say it: for the top queries' longest
        executions (and query_id's, if given), each rule that fired with its expected gain and basis,
        the largest gain first per statement."""
        extra = [r.example_id for r in top_statements(self.db, n=1, query_id=query_id)] if query_id is not None else []
        derive.derive(self.db, derive.ADVICE_TABLES, advise=extra, write=False)
        ids = [int(r[0]) for r in self.db.sql("SELECT statement_id FROM advised_statement ORDER BY 1").fetchall()]
        if query_id is not None:
            ids = extra
        by_statement = derive.advice_of(self.db, ids)
        records = [asdict(a) for sid in ids for a in ranked_advice(by_statement.get(sid, []))]
        return _frame(records, ["statement_id", "query_id", "rule", "advice", "evidence", "expected_gain_ns", "basis"])

    def nodes(self):
        """node_sample: per node and sampling interval its CPU (user, sys, iowait, idle ns), each disk's
        and interface's bytes and requests (mwinv-sample), what the report's node timelines draw."""
        return self._table("node_sample", [], "node, ts_ns, disk, net_iface")

    def sql(self, query: str):
        """Any query over the session: the capture's tables and the derived ones (docs/capture.md, e.g.
        statement, kernel_event, statement_attribution, statement_kernel_function, statement_link)."""
        return self.db.sql(query).df()

    def _table(self, table: str, where: list[str], order: str):
        if not self.db.modules.holds(table):
            # no rows, its columns; nothing created in the session: the runner may still build it there
            return _frame([], SCHEMAS[table].names)
        return self.sql(f"SELECT * FROM {table}" + (f" WHERE {' AND '.join(where)}" if where else "")
                        + f" ORDER BY {order}")


def open(path: str | os.PathLike, progress=None) -> Capture:  # noqa: A001 - mwinv.open, like io.open
    """A capture directory, correlated: one that has statements and no attribution yet is correlated
    now and its derived tables written into it (mwinv-correlate's step); after that it is read as it is.
    progress(step): called as each step of a correlation begins."""
    cap = CaptureDir(path)
    if not cap.path.is_dir():
        raise MwinvError(f"{cap.path}: no such capture directory")
    if cap.has("statement") and not cap.has("statement_attribution"):
        db = correlate(cap.path, progress=progress)
    else:
        db = open_correlated(cap.path)
    return Capture(db)


class Experiment:
    """An experiment's directory (mwinv experiment run -o OUT): its results and the report's derived
    views (experiment/sql/: cell_query, speedup, scheme_diff, sweep) as DataFrames."""

    def __init__(self, out: str | os.PathLike):
        from mwinv.experiment.report import open_results

        self.path = Path(out)
        self.con = open_results(self.path)

    def __enter__(self) -> Experiment:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def __repr__(self) -> str:
        return f"<mwinv.Experiment {str(self.path)!r}>"

    def results(self):
        """One row per cell, query, repetition and stream: its levels, wall_ns, error, class, estimate and
        the coordinator's components (c_<component> ns)."""
        return self.sql("SELECT * FROM results ORDER BY cell, query, repetition, stream")

    def node_results(self):
        """Per run and data node: its execution, idle time, bytes sent, rows, fetches, critical path."""
        return self.sql("SELECT * FROM results_node ORDER BY cell, query, repetition, stream, node")

    def speedup(self):
        """Per group of cells, query and node count: the speed-up over the smallest node count (the
        report's first table)."""
        return self.sql("SELECT * FROM speedup ORDER BY grp, query, nodes")

    def summary(self) -> dict:
        """What the report shows, as its summary.json holds it (predictions, sweeps, advice...)."""
        from mwinv.experiment.report import summarize

        return summarize(self.path)

    def sql(self, query: str):
        return self.con.execute(query).df()


__all__ = ["Capture", "Experiment", "RANK_BY", "open"]
