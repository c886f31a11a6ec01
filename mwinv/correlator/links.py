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


def build_links(db: CaptureDB) -> int:
    """The table statement_link (empty unless the capture is a cluster's with sessions). Rows made."""
    manifest = db.capture.manifest()
    coordinator = manifest.get("coordinator")
    clocks = node_clocks(manifest)
    db.con.execute("""CREATE OR REPLACE TABLE statement_link (node VARCHAR, statement_id BIGINT, parent_node VARCHAR,
                      parent_statement_id BIGINT, offset_ns BIGINT, offset_error_ns BIGINT)""")
    if not coordinator or not db.has("session") or not clocks:
        return 0
    values = ", ".join("(" + ", ".join(literal(v) if isinstance(v, str) else str(int(v)) for v in c) + ")"
                       for c in clocks)
    db.con.execute(f"""
        CREATE OR REPLACE TABLE node_clock AS SELECT * FROM (VALUES {values})
            AS c(node, at_s, off_s, err_s, at_e, off_e, err_e)""")
    db.con.execute(rf"""
        INSERT INTO statement_link
        WITH fdw AS (
            SELECT node, pid, TRY_CAST(regexp_extract(application_name, '^mwinv-fdw:(\d+)$', 1) AS INTEGER) AS coord_pid
            FROM session WHERE application_name LIKE 'mwinv-fdw:%'),
        remote AS (
            -- the node's offset at that time, drift interpolated linearly between the two measurements
            SELECT s.node, s.statement_id, f.coord_pid, s.start_ns,
                   CAST(c.off_s + (c.off_e - c.off_s) * greatest(0, least(1,
                        (s.start_ns - c.off_s - c.at_s) / greatest(1, c.at_e - c.at_s))) AS BIGINT) AS off,
                   greatest(c.err_s, c.err_e) AS err
            FROM statement_clean s JOIN fdw f USING (node, pid) JOIN node_clock c USING (node)
            WHERE coalesce(s.nesting_level, 0) = 0 AND s.node <> {literal(coordinator)}),
        coord AS (
            SELECT pid, statement_id, start_ns FROM statement_clean
            WHERE node = {literal(coordinator)} AND coalesce(nesting_level, 0) = 0)
        -- the coordinator sent it: it began after the coordinator's statement began, up to the error
        SELECT r.node, r.statement_id, {literal(coordinator)}, c.statement_id, r.off, r.err
        FROM remote r ASOF JOIN coord c ON r.coord_pid = c.pid AND r.start_ns - r.off + r.err >= c.start_ns""")
    return db.sql("SELECT count(*) FROM statement_link").fetchone()[0]


def remote_waits(db: CaptureDB) -> None:
    """A coordinator statement with remote parts sleeps in epoll_wait on its nodes' sockets (postgres_fdw's
    async append), which the attribution alone calls other_wait: for such a statement it is remote_wait,
    the nodes' work and the links (its parts on each node tell which). A synchronous fetch waits in
    poll(), which stays network."""
    db.con.execute("""
        CREATE OR REPLACE TABLE statement_attribution AS
        WITH parents AS (SELECT DISTINCT parent_node AS node, parent_statement_id AS statement_id FROM statement_link),
        moved AS (
            SELECT a.node, a.statement_id, sum(a.ns) AS ns, sum(a.from_workers_ns) AS w
            FROM statement_attribution a JOIN parents USING (node, statement_id)
            WHERE a.component = 'other_wait' GROUP BY ALL)
        SELECT a.node, a.statement_id, a.query_id, a.component,
               CASE WHEN m.statement_id IS NULL THEN a.ns
                    WHEN a.component = 'other_wait' THEN 0 WHEN a.component = 'remote_wait' THEN a.ns + m.ns
                    ELSE a.ns END AS ns,
               CASE WHEN m.statement_id IS NULL THEN a.from_workers_ns
                    WHEN a.component = 'other_wait' THEN 0 WHEN a.component = 'remote_wait' THEN a.from_workers_ns + m.w
                    ELSE a.from_workers_ns END AS from_workers_ns
        FROM statement_attribution a LEFT JOIN moved m USING (node, statement_id)""")
