"""The slow query log (MariaDB and MySQL, with `log_slow_verbosity`) as a fallback reader, where
performance_schema is off: each entry a `statement` (its start from `SET timestamp`, to the second;
its duration from Query_time, to the microsecond), its counters in `statement_stat`, and the trace's
own account in `dbms_call` (the query) and `dbms_wait` (its lock time), so that the correlator
attributes what the log knows — the lock wait — and shows the rest as unaccounted-for."""

from __future__ import annotations

import re
from pathlib import Path

from mwinv.capture.columns import rows_to_tables
from mwinv.capture.tables import Capture, text_hash
from mwinv.engines.sqltext import normalized
from mwinv.errors import MwinvError

DBMS = "mariadb"
_FIELD = re.compile(r"([A-Za-z_]+):\s*(\S*)")
_USER = re.compile(r"^# User@Host: (\S+?)\[")
# header fields that are counters of the statement, as statement_stat names
STATS = {"Rows_examined": "rows_examined", "Rows_read": "rows_read", "Bytes_sent": "bytes_sent",
         "Tmp_tables": "created_tmp_tables", "Tmp_disk_tables": "created_tmp_disk_tables",
         "Merge_passes": "sort_merge_passes", "Last_errno": "mysql_errno"}
FLAGS = {"Full_scan": "no_index_used", "Full_join": "select_full_join", "Filesort_on_disk": "filesort_on_disk",
         "Tmp_table_on_disk": "tmp_table_on_disk"}


def _entries(lines: list[str]):
    """(first line number, header dict, user, [(line number, text line)]) per entry."""
    header: dict[str, str] = {}
    user, start, text = None, None, []
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        if line.startswith(("# Time:", "# User@Host:")):
            if text:    # a header after text: the previous entry is complete
                yield start, header, user, text
                header, user, start, text = {}, None, None, []
            start = start or n
            m = _USER.match(line)
            if m:
                user = m.group(1)
            header.update(_FIELD.findall(line[2:]))
            continue
        if start is None:
            continue    # the server's banner before the first entry
        if line.startswith("#"):
            if not line.startswith("# explain:"):
                header.update(_FIELD.findall(line[2:]))
            continue
        if re.match(r"^\S+, Version: .* started with:$", line) or line.startswith(("Tcp port:", "Time ")):
            continue    # a server restart's banner inside the log
        text.append((n, line))
    if text:
        yield start, header, user, text


def _ns(seconds: str) -> int:
    """A header's time in seconds as ns; a value that is no finite time of 0 or more: ValueError."""
    s = float(seconds)
    if not 0 <= s < 1e9:
        raise ValueError(seconds)
    return round(s * 1e9)


def read(path: str | Path, capture_dir: str | Path, node: str = "mariadb") -> dict:
    """Read one slow log into the capture; returns counts. A malformed header value is a one-line error
    naming the file and line; what was read before it is written."""
    p = Path(path)
    try:
        lines = p.read_text(errors="replace").splitlines()
    except OSError as exc:
        raise MwinvError(f"{p}: cannot read ({exc.strerror})") from None
    cap = Capture(capture_dir)
    cap.create(**({} if cap.manifest() else {"capture_kind": "dbms-log"}))
    statements, texts, stats, calls, waits, seen = [], [], [], [], [], set()
    base = 1
    if cap.has("statement"):
        t = cap.read("statement")
        base = max((s for n, s in zip(t.column("node").to_pylist(), t.column("statement_id").to_pylist())
                    if n == node), default=0) + 1
    problem = None
    schema = None
    for first, header, user, body in _entries(lines):
        sql_lines, stamp = [], None
        for n, line in body:
            m = re.match(r"^SET timestamp=(\d+);$", line)
            if m:
                stamp = int(m.group(1))
                continue
            m = re.match(r"^use `?([^`;]+)`?;$", line)
            if m and not sql_lines:
                schema = m.group(1)
                continue
            sql_lines.append(line)
        text = "\n".join(sql_lines).strip().rstrip(";")
        try:
            query_ns, lock_ns = _ns(header["Query_time"]), _ns(header.get("Lock_time", "0"))
            rows = int(header.get("Rows_sent", 0) or 0) + int(header.get("Rows_affected", 0) or 0)
        except (KeyError, ValueError):
            problem = problem or f"{p}:{first}: entry without a valid Query_time, Lock_time or Rows_sent"
            continue
        if stamp is None or stamp * 1_000_000_000 + query_ns >= 2 ** 63:
            problem = problem or f"{p}:{first}: entry without a valid SET timestamp"
            continue
        sid = base + len(statements)
        start = stamp * 1_000_000_000
        h = text_hash(text)
        qid = text_hash(normalized(text))
        if h not in seen:
            seen.add(h)
            texts.append({"query_text_hash": h, "query_id": qid, "text": text})
        tid = header.get("Thread_id") or header.get("Id")
        statements.append({
            "node": node, "dbms": DBMS, "pid": None, "statement_id": sid, "query_id": qid, "query_text_hash": h,
            "database": header.get("Schema") or schema, "username": user, "start_ns": start,
            "end_ns": start + query_ns, "start_wall_ns": start,
            "rows": rows,
            "nesting_level": 0, "errored": header.get("Last_errno", "0") not in ("0", ""),
        })
        calls.append({"node": node, "file": str(p), "line": first, "cursor": int(tid) if tid and tid.isdigit() else None,
                      "call": "QUERY", "dep": 0, "statement_id": sid, "top_statement_id": sid, "start_ns": start,
                      "end_ns": start + query_ns, "e_ns": query_ns})
        if lock_ns:
            waits.append({"node": node, "file": str(p), "line": first, "event": "lock time", "component": "lock_wait",
                          "ela_ns": lock_ns, "end_ns": start + lock_ns, "statement_id": sid, "top_statement_id": sid,
                          "in_call": True, "call_dep": 0})
        for k, name in STATS.items():
            if header.get(k, "").isdigit() and int(header[k]):
                stats.append({"node": node, "statement_id": sid, "name": name, "value": int(header[k])})
        for k, name in FLAGS.items():
            if header.get(k) == "Yes":
                stats.append({"node": node, "statement_id": sid, "name": name, "value": 1})
        if lock_ns:
            stats.append({"node": node, "statement_id": sid, "name": "lock_time_ns", "value": lock_ns})
    for table, data in rows_to_tables(p, (("statement", statements), ("statement_text", texts),
                                          ("statement_stat", stats), ("dbms_call", calls), ("dbms_wait", waits))):
        cap.write_part(table, data, node=node)
    info = cap.manifest().get("nodes", {}).get(node, {})
    cap.update_manifest(nodes={node: {**info, "clock": "realtime", "dbms": DBMS, "statement_source": "slow query log",
                                      "slow_logs": [*info.get("slow_logs", []), str(p)]}})
    if problem:
        raise MwinvError(f"{problem}; the other {len(statements)} entries were read into {capture_dir}")
    return {"statements": len(statements), "texts": len(texts)}
