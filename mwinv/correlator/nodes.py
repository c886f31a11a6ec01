"""A coordinator statement seen through its data nodes (cluster captures): the coordinator waits on
the nodes' sockets, and that wait is the nodes' work and the links. Per node, the remote statements
linked to it (statement_link): their execution summed by component on that node, the time the node
waited for the coordinator between fetches (client_wait: the coordinator's own processing, not the
node's), fetch round trips, rows and bytes shipped, and when the node's last part ended on the
coordinator's clock. The node that ended last is the critical path ([Taufer]: the max over nodes).
sql/advice_node_part.sql derives them for the advised statements; sql/model_statement.sql and
model_statement_io.sql put the nodes' parts under their coordinator statement for the model."""

from __future__ import annotations

from dataclasses import dataclass, field

from mwinv.capture.tables import ATTRIBUTION_COMPONENTS


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


def node_parts_from(cursor) -> dict[int, list[NodePart]]:
    """The NodeParts of rows of statement_node_part's columns (sql/advice_node_part.sql), by statement id."""
    cols = [d[0] for d in cursor.description]
    out: dict[int, list[NodePart]] = {}
    for values in cursor.fetchall():
        r = dict(zip(cols, values))
        out.setdefault(r["statement_id"], []).append(NodePart(
            r["node"], r["statements"], r["fetches"], r["rows"], r["sent_bytes"], r["execution_ns"], r["idle_ns"],
            {c: r[f"{c}_ns"] for c in ATTRIBUTION_COMPONENTS}, r["first_start_ns"], r["last_end_ns"], r["critical"]))
    return out


def node_parts(db, statement_id: int) -> list[NodePart]:
    """The per-node parts of one coordinator statement of a correlated session (db: load.CaptureDB;
    sql/advice_node_part.sql in a request of its own), the critical one marked; empty when nothing is
    linked to it."""
    if not db.has("statement"):
        return []
    with db.modules.request(advice_ids=[int(statement_id)]) as req:
        req.build("advice_node_part")
        return node_parts_from(db.sql("SELECT * FROM advice_node_part ORDER BY node")).get(statement_id, [])
