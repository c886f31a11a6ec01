"""A coordinator statement seen through its data nodes (cluster captures): the coordinator waits on
the nodes' sockets, and that wait is the nodes' work and the links. Per node, the remote statements
linked to it (statement_link): their execution summed by component on that node, the time the node
waited for the coordinator between fetches (client_wait: the coordinator's own processing, not the
node's), fetch round trips, rows and bytes shipped, and when the node's last part ended on the
coordinator's clock. The node that ended last is the critical path ([Taufer]: the max over nodes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator.attribution import NET_TX_SYSCALLS, _in
from mwinv.correlator.load import CaptureDB, literal, session_tables


@dataclass
class NodePart:
    node: str
    statements: int
    fetches: int
    rows: int
    sent_bytes: int          # what the node's backends sent (to the coordinator; 0 without a kernel trace)
    execution_ns: int        # the remote statements' time less their client_wait
    idle_ns: int             # from the node's first to its last part, not executing: waiting for the coordinator
    components: dict[str, int] = field(default_factory=dict)
    first_start_ns: int = 0  # on the coordinator's clock, from the coordinator statement's start
    last_end_ns: int = 0     # of its last FETCH (CLOSE and COMMIT come with the coordinator's end, on all nodes)
    critical: bool = False


def node_parts(db: CaptureDB, statement_id: int) -> list[NodePart]:
    """The per-node parts of a coordinator statement, the critical one marked; empty when nothing is
    linked to it."""
    if not db.has("statement") or "statement_link" not in session_tables(db):
        return []
    comps = ", ".join(f"coalesce(sum(a.ns) FILTER (WHERE a.component = {literal(c)}), 0) AS {c}"
                      for c in ATTRIBUTION_COMPONENTS)
    rows = db.sql(f"""
        WITH r AS (
            SELECT l.node, s.statement_id, s.pid, s.start_ns AS node_start, s.end_ns AS node_end, s.start_ns - l.offset_ns - p.start_ns AS rel_start,
                   s.end_ns - l.offset_ns - p.start_ns AS rel_end, coalesce(s.rows, 0) AS rows,
                   coalesce(t.text, '') ILIKE 'FETCH%' AS is_fetch,
                   regexp_matches(coalesce(t.text, ''), '^ *(START TRANSACTION|COMMIT|ABORT|ROLLBACK)', 'i') AS xact
            FROM statement_link l JOIN statement_clean s USING (node, statement_id)
            JOIN statement_clean p ON p.node = l.parent_node AND p.statement_id = l.parent_statement_id
            LEFT JOIN (SELECT DISTINCT query_text_hash, text FROM statement_text) t
                ON t.query_text_hash = s.query_text_hash
            WHERE l.parent_statement_id = {literal(statement_id)}),
        a AS (
            SELECT r.node, {comps} FROM r JOIN statement_attribution a USING (node, statement_id) GROUP BY r.node),
        -- a backend flushes a result when its output buffer fills (8 KiB) and when the message is done,
        -- after the FETCH's record ended: its sends are counted from its first to its last part
        span AS (SELECT node, pid, min(node_start) AS lo, max(node_end) AS hi FROM r GROUP BY ALL),
        io AS (
            SELECT span.node, coalesce(sum(k.syscall_ret), 0) AS sent FROM span
            LEFT JOIN kernel_event k ON k.node = span.node AND k.pid = span.pid AND k.ts_ns BETWEEN span.lo AND span.hi
                 AND starts_with(k.event, 'sys_exit') AND k.syscall_nr IN {_in(NET_TX_SYSCALLS)} AND k.syscall_ret > 0
            GROUP BY span.node)
        SELECT r.node, count(*), count(*) FILTER (WHERE is_fetch), sum(rows), any_value(io.sent),
               min(rel_start), coalesce(max(rel_end) FILTER (WHERE is_fetch), max(rel_end) FILTER (WHERE NOT xact),
                                        max(rel_end)), {", ".join(f"any_value(a.{c})" for c in ATTRIBUTION_COMPONENTS)}
        FROM r LEFT JOIN a USING (node) LEFT JOIN io USING (node) GROUP BY r.node ORDER BY r.node""").fetchall()
    parts = []
    for node, n, fetches, nrows, sent, first, last, *ns in rows:
        components = {c: int(v or 0) for c, v in zip(ATTRIBUTION_COMPONENTS, ns)}
        execution = sum(components.values()) - components.get("client_wait", 0)
        parts.append(NodePart(node, n, fetches, int(nrows or 0), int(sent or 0), execution,
                              max(0, int(last) - int(first) - execution), components, int(first), int(last)))
    if parts:
        max(parts, key=lambda p: p.last_end_ns).critical = True
    return parts


def cluster_model_inputs(db: CaptureDB, schema: str) -> None:
    """The model's inputs (statements, attribution, statement_io) for a cluster capture, as tables in
    `schema` of its session: a data node's linked statements become sub-statements of their coordinator
    statement (the model's per-node rows: [Taufer]'s max over the nodes and the coordinator), each remote
    statement's network bytes are what its backend sent until its next statement began (a FETCH's result
    is flushed after its record ends), and a coordinator statement with remote parts counts no received
    bytes of its own: they crossed the nodes' links and are counted there."""
    from mwinv.correlator.attribution import NET_RX_SYSCALLS

    db.con.execute(f"""
        CREATE OR REPLACE TABLE {schema}.statements AS
        SELECT s.* REPLACE (coalesce(l.parent_statement_id, s.parent_statement_id) AS parent_statement_id)
        FROM main.statement_clean s LEFT JOIN main.statement_link l USING (node, statement_id)""")
    db.con.execute(f"CREATE OR REPLACE VIEW {schema}.attribution AS SELECT * FROM main.statement_attribution")
    db.con.execute(f"""
        CREATE OR REPLACE TABLE {schema}.statement_io AS
        WITH remote AS (
            SELECT s.node, s.statement_id, s.pid, s.start_ns,
                   coalesce(lead(s.start_ns) OVER (PARTITION BY s.node, s.pid ORDER BY s.start_ns), s.end_ns) AS until
            FROM main.statement_clean s JOIN main.statement_link l USING (node, statement_id)),
        -- each send or receive to the remote statement begun last before it on its pid (they do not
        -- overlap): an ASOF join, where a range join on the pid compared every statement with every
        -- event of its backend (a data node's thousands of FETCHes at SF 1: over ten minutes a cell)
        io AS (
            SELECT r.node, r.statement_id, k.syscall_nr, k.syscall_ret
            FROM (SELECT node, pid, ts_ns, syscall_nr, syscall_ret FROM main.kernel_event
                  WHERE starts_with(event, 'sys_exit') AND syscall_ret > 0
                    AND syscall_nr IN {_in(NET_TX_SYSCALLS + NET_RX_SYSCALLS)}) k
            ASOF JOIN remote r ON k.node = r.node AND k.pid = r.pid AND k.ts_ns >= r.start_ns
            WHERE k.ts_ns < r.until),
        sent AS (
            SELECT r.node, r.statement_id,
                   coalesce(sum(k.syscall_ret) FILTER (WHERE k.syscall_nr IN {_in(NET_TX_SYSCALLS)}), 0) AS tx,
                   coalesce(sum(k.syscall_ret) FILTER (WHERE k.syscall_nr IN {_in(NET_RX_SYSCALLS)}), 0) AS rx
            FROM remote r LEFT JOIN io k USING (node, statement_id)
            GROUP BY ALL),
        parents AS (SELECT DISTINCT parent_node AS node, parent_statement_id AS statement_id FROM main.statement_link)
        SELECT i.* REPLACE (
                   CASE WHEN sent.statement_id IS NOT NULL THEN sent.rx
                        WHEN p.statement_id IS NOT NULL THEN 0 ELSE i.net_rx_bytes END AS net_rx_bytes,
                   CASE WHEN sent.statement_id IS NOT NULL THEN sent.tx ELSE i.net_tx_bytes END AS net_tx_bytes)
        FROM main.statement_io i LEFT JOIN sent USING (node, statement_id) LEFT JOIN parents p USING (node, statement_id)
        """)
