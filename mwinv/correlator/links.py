"""statement_link: which coordinator statement each data node's statement served (cluster captures).

The link is carried by the connection, not guessed from time: the coordinator names its backend's pid
in its postgres_fdw connections' application_name (`mwinv-fdw:<pid>`), each node's sessions are in
the `session` table, and a backend runs one top-level statement at a time. So a node's statement
belongs to the statement its coordinator backend was running when the node's statement began,
that time put on the coordinator's clock with the node's measured offset (interpolated between the
start and the end of the capture: drift). What a node receives for one coordinator statement is a
remote transaction of DECLARE, many FETCHes of fetch_size rows, CLOSE and COMMIT: all linked."""

from __future__ import annotations

from mwinv.correlator.load import CaptureDB, literal
from mwinv.correlator.modules import step


def node_clocks(manifest: dict) -> list[tuple]:
    """(node, at_start, offset_start, error_start, at_end, offset_end, error_end) per node that has a
    measured offset; the coordinator's clock is the reference (0)."""
    out = []
    for node, info in (manifest.get("nodes") or {}).items():
        s, e = info.get("clock_offset_start"), info.get("clock_offset_end") or info.get("clock_offset_start")
        if node == manifest.get("coordinator") or not s:
            out.append((node, 0, 0, 0, 1, 0, 0))
            continue
        out.append((node, s["at_ns"], s["offset_ns"], s["error_ns"], e["at_ns"], e["offset_ns"], e["error_ns"]))
    return out


@step(builds=("node_clock",), inputs=())
def node_clock(db: CaptureDB) -> None:
    """node_clock: each node's clock offsets from the manifest (node_clocks), for sql/statement_link.sql;
    the manifest's numbers as a literal table (binding rows would import pandas)."""
    cols = "node, at_s, off_s, err_s, at_e, off_e, err_e"
    typed = ("node::VARCHAR AS node, " + ", ".join(f"{c}::BIGINT AS {c}" for c in cols.split(", ")[1:]))
    clocks = node_clocks(db.capture.manifest())
    values = ", ".join("(" + ", ".join(literal(v) if isinstance(v, str) else str(int(v)) for v in c) + ")"
                       for c in clocks) or "(NULL, 0, 0, 0, 0, 0, 0)"
    db.con.execute(f"CREATE TABLE node_clock AS SELECT {typed} FROM (VALUES {values}) AS c({cols})"
                   + ("" if clocks else " WHERE false"))
