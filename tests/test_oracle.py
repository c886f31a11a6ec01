"""Oracle extended SQL traces (10046) on real trace files (tests/golden/oracle_10046, sources and
licences in its SOURCES.md): the statements, their attribution, tkprof's totals and the profile,
each checked against sums computed here from the raw lines, independently of the reader."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from mwinv.correlator.load import literal, read_parquet
from mwinv.correlator.pipeline import correlate
from mwinv.engines.oracle import importer, profile
from mwinv.engines.oracle.trace10046 import parse
from mwinv.engines.sqltext import normalized
from mwinv.errors import MwinvError

TRACES = Path(__file__).parent / "golden" / "oracle_10046"
CLEAN = sorted(p for p in TRACES.glob("*.trc") if "broken" not in p.name and "malformed" not in p.name)
JK = [TRACES / "jkstill_js122a1_ora_9850.trc", TRACES / "jkstill_js122a1_ora_9854.trc"]
SQLNET = sorted(TRACES.glob("jkstill_js02_*.trc"))   # 11.2.0.4, one host: replies of several packets
CALL = re.compile(r"^(PARSE|EXEC|FETCH) #\d+:c=(\d+),e=(\d+),p=(\d+),cr=(\d+),cu=(\d+),mis=(\d+),r=(\d+),dep=(\d+)")


def raw_calls(path: Path) -> list[tuple]:
    """(call, c, e, p, cr, cu, mis, r, dep) of every PARSE/EXEC/FETCH line, read with one regex."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        m = CALL.match(line)
        if m:
            out.append((m.group(1), *map(int, m.groups()[1:])))
    return out


BIN = Path(sys.executable).parent


def run_cli(*args: str, tool: str = "mwinv") -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("oracle") / "cap"
    importer.import_files(out, CLEAN)
    correlate(out)
    return out


def parts(capture: Path, table: str) -> str:
    """SQL reading a table's parts, the path quoted by the project's one helper."""
    return read_parquet(sorted((capture / table).glob("*.parquet")))


# a statement's attribution, a component of 0 left out
COMPONENTS_OF = "SELECT component, ns FROM statement_attribution WHERE statement_id = ?"


def q(capture: Path, sql: str, params: list | None = None):
    con = duckdb.connect()
    for t in ("statement", "statement_attribution", "dbms_call", "dbms_wait", "plan_operation", "statement_text",
              "tcp_sample"):
        if (capture / t).is_dir():
            con.execute(f"CREATE VIEW {t} AS SELECT * FROM {parts(capture, t)}")
    return con.execute(sql, params or []).fetchall()


def oracle_unaccounted(path: Path) -> int:
    """Oracle's unaccounted-for ns of the file's longest top-level execution (PARSE + EXEC + CLOSE of one
    cursor), from the raw lines: its wall time less its calls' c= and every wait (the client's excepted)
    that ended inside it."""
    lines = path.read_text().splitlines()
    calls = [(m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), int(re.search(r"tim=(\d+)", line).group(1)))
             for line in lines if (m := re.match(r"^(PARSE|EXEC|CLOSE) (#\d+):c=(\d+),e=(\d+),.*dep=0", line))]
    kind, cursor, c, e, tim = max((x for x in calls if x[0] == "EXEC"), key=lambda x: x[3])
    parse = max((x for x in calls if x[0] == "PARSE" and x[1] == cursor and x[4] <= tim - e), key=lambda x: x[4])
    close = min((x for x in calls if x[0] == "CLOSE" and x[1] == cursor and x[4] > tim), key=lambda x: x[4])
    start, end = parse[4] - parse[3], close[4]
    waits = sum(int(m.group(1)) for line in lines
                if (m := re.match(r"^WAIT #\d+: nam='(?!SQL\*Net message from client).*' ela= (\d+) .*tim=(\d+)$", line))
                and start < int(m.group(2)) <= end)
    idle = sum(int(m.group(1)) for line in lines
               if (m := re.match(r"^WAIT #\d+: nam='SQL\*Net message from client' ela= (\d+) .*tim=(\d+)$", line))
               and start < int(m.group(2)) <= end)
    return (end - start - c - parse[2] - close[2] - waits - idle) * 1000


def test_every_real_trace_is_read(capture):
    for path in sorted(TRACES.glob("*.trc")):
        tf = parse(path)
        assert tf.os_pid, path
        assert tf.version and tf.version[0] in (11, 12, 19), path
        assert len(tf.calls) == len([1 for line in path.read_text().splitlines()
                                     if re.match(r"^(PARSE|EXEC|FETCH|CLOSE|LOB[A-Z]+)[ #:]", line)
                                     and re.search(r"tim=\d+\s*$", line)]), path
    # the Oracle Net trace (event 10079) interleaved in jkstill/sqlnet's traces: its lines and memory
    # dumps are skipped and counted, every WAIT line still read
    for path in SQLNET:
        lines = path.read_text(errors="replace").splitlines()
        tf = parse(path)
        assert len(tf.waits) == sum(line.startswith("WAIT #") for line in lines) and not tf.malformed, path
        net = sum(bool(re.match(r"^(Dump of memory|[0-9A-F]{9} |IFCD(SEND|RECV)|\s+\d+ bytes )", line))
                  for line in lines)
        assert tf.other_lines >= net, path
    assert parse(SQLNET[0]).other_lines > 1000
    # one capture, one node per host, both sessions of the RAC instance on it
    nodes = dict(q(capture, "SELECT node, count(DISTINCT pid) FROM statement GROUP BY node"))
    assert nodes["ora122rac01.jks.com"] == 2


def test_components_sum_to_wall_time(capture):
    rows = q(capture, """
        SELECT s.node, s.statement_id, any_value(s.end_ns - s.start_ns), sum(a.ns), count(a.component)
        FROM statement s JOIN statement_attribution a USING (node, statement_id)
        WHERE coalesce(s.nesting_level, 0) = 0 GROUP BY ALL""")
    tops = q(capture, "SELECT count(*) FROM statement WHERE nesting_level = 0")[0][0]
    assert len(rows) == tops > 10
    assert all(wall == total for _, _, wall, total, _ in rows)


def closing_cpu(path: Path) -> int:
    """c= of the dep=0 CLOSE lines that close a cursor with a PARSE, EXEC or FETCH since it was last
    parsed or closed (a stray CLOSE ends nothing), read with regexes."""
    opened, total = set(), 0
    for line in path.read_text(errors="replace").splitlines():
        if m := re.match(r"^(?:PARSING IN CURSOR|CLOSE) (#\d+)", line):
            if line.startswith("CLOSE") and m.group(1) in opened and (mc := re.search(r":c=(\d+),.*dep=0,", line)):
                total += int(mc.group(1))
            opened.discard(m.group(1))
        elif m := re.match(r"^(?:PARSE|EXEC|FETCH) (#\d+):", line):
            opened.add(m.group(1))
    return total


def test_recursive_calls_counted_once(capture):
    """The top-level statements' CPU is their own calls' c= (which include the recursive calls'), the
    CLOSE that ends each one's cursor included: the sum over them equals those dep=0 call lines' c=, not
    the sum over all depths."""
    want = sum(c for f in CLEAN for call, c, *_rest, dep in raw_calls(f) if dep == 0)
    want += sum(closing_cpu(f) for f in CLEAN)
    assert sum(closing_cpu(f) for f in CLEAN) > 0
    everything = sum(c for f in CLEAN for call, c, *_ in raw_calls(f))
    got = q(capture, "SELECT sum(ns) FROM statement_attribution WHERE component = 'cpu_user'")[0][0]
    assert got == want * 1000
    assert everything > want


def test_tkprof_totals_match_the_raw_lines(capture):
    db = profile.open_oracle(capture)
    got = {(rec, call): row for rec, call, *row in profile.overall(db)}
    name = {"PARSE": "Parse", "EXEC": "Execute", "FETCH": "Fetch"}
    want: dict = {}
    for f in CLEAN:
        for call, c, e, p, cr, cu, mis, r, dep in raw_calls(f):
            w = want.setdefault((dep > 0, name[call]), [0] * 8)
            for k, v in enumerate((1, c * 1000, e * 1000, p, cr, cu, r, mis)):
                w[k] += v
    assert set(got) == set(want)
    for key, w in want.items():
        assert list(got[key]) == w, key


def test_profile_accounts_for_each_file_span(capture):
    """Every microsecond of a file once: the profile's items sum to the file's span, from the first
    top-level call's or wait's start to the last one's end (computed here from the raw tim values)."""
    db = profile.open_oracle(capture)
    for path in JK:
        t0, t1 = None, None
        for line in path.read_text().splitlines():
            m = CALL.match(line) or re.match(r"^(CLOSE) #\d+:c=(\d+),e=(\d+),dep=(\d+)", line)
            w = re.match(r"^WAIT #\d+: nam='.*' ela= (\d+) .* tim=(\d+)$", line)
            tim = re.search(r"tim=(\d+)", line)
            if m and int((m.group(9) if m.lastindex >= 9 else m.group(4))) == 0:
                start, end = int(tim.group(1)) - int(m.group(3)), int(tim.group(1))
            elif w:
                start, end = int(w.group(2)) - int(w.group(1)), int(w.group(2))
            else:
                continue
            t0, t1 = min(t0 or start, start), max(t1 or end, end)
        rows, total = profile.profile(db, where=f"file = {literal(str(path))}")
        assert total == (t1 - t0) * 1000, path
        assert any(r.group == "unaccounted-for within calls" for r in rows)


def test_waits_placed_in_their_calls(capture):
    path = str(TRACES / "jkstill_js122a1_ora_9854.trc")
    rows = {(ev, ela): (in_call, dep, nest) for ev, ela, in_call, dep, nest in q(capture, f"""
        SELECT w.event, w.ela_ns // 1000, w.in_call, w.call_dep, s.nesting_level
        FROM dbms_wait w LEFT JOIN statement s ON s.node = w.node AND s.statement_id = w.statement_id
        WHERE w.file = {literal(str(path))}""")}
    # before the block's PARSING IN CURSOR line, inside its PARSE call
    assert rows[("cursor: pin S wait on X", 262717)] == (True, 0, 0)
    assert rows[("library cache: mutex X", 7325)] == (True, 0, 0)
    # inside a recursive cursor's PARSE, and its FETCH
    assert rows[("cursor: pin S wait on X", 68182)] == (True, 1, 1)
    assert rows[("read by other session", 17610)] == (True, 1, 1)
    # the client's think time is between calls
    assert rows[("SQL*Net message from client", 617)][0] is False
    block = q(capture, f"""
        SELECT a.component, a.ns // 1000 FROM statement_attribution a JOIN statement s USING (node, statement_id)
        JOIN dbms_call c ON c.node = s.node AND c.statement_id = s.statement_id AND c.call = 'EXEC'
        WHERE c.file = {literal(str(path))} AND s.nesting_level = 0 AND c.e_ns = 5134386000""")
    shares = dict(block)
    assert shares["other_wait"] >= 10 * 499000   # ten DBMS_LOCK.SLEEP(.5)
    assert shares["lock_wait"] == 262717 + 7325 + 68182 + 7044
    assert shares["cpu_user"] == 4881 + 23944


def test_client_round_trips_are_not_the_statements(capture):
    """two_statements_one_cursor: twelve fetches of one execution and its CLOSE with SQL*Net message
    from client between them: their sum is client_wait, outside the statement's ranked total."""
    path = TRACES / "trctools_two_statements_one_cursor.trc"
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "sqlid='6ssxu7vjxb51a'" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("CLOSE"))
    idle = sum(int(re.search(r"ela= (\d+)", line).group(1)) for line in lines[start:end]
               if "SQL*Net message from client" in line)
    got = q(capture, f"""
        SELECT s.client_wait_ns, a.ns FROM statement s JOIN statement_attribution a USING (node, statement_id)
        JOIN statement_text t USING (query_text_hash)
        WHERE a.component = 'client_wait' AND s.pid = 613102 AND t.text LIKE 'select ...'
          AND s.statement_id IN (SELECT statement_id FROM dbms_call WHERE file = {literal(str(path))})
        ORDER BY s.end_ns - s.start_ns DESC LIMIT 1""")
    assert got == [(idle * 1000, idle * 1000)]


RECURSIVE_BETWEEN_FETCHES = """\
PARSING IN CURSOR #140641987000001 len=46 dep=1 uid=0 oct=6 lid=0 tim=5793511831525 hv=1 ad='1' sqlid='0aaaaaaaaaaaa'
update sys.mon_mods$ set inserts = inserts + 1
END OF STMT
PARSE #140641987000001:c=4,e=5,p=0,cr=0,cu=0,mis=0,r=0,dep=1,og=4,plh=0,tim=5793511831530
WAIT #140641987000001: nam='log file sync' ela= 10 buffer#=1 sync scn=1 p3=0 obj#=-1 tim=5793511831542
EXEC #140641987000001:c=2,e=12,p=0,cr=0,cu=1,mis=0,r=1,dep=1,og=4,plh=0,tim=5793511831543
CLOSE #140641987000001:c=1,e=1,dep=1,type=3,tim=5793511831545
"""


def test_recursive_statement_between_fetches(tmp_path):
    """A recursive statement that ran between its parent's two fetches (in none of its calls; inserted
    into the real simple_trace, in the 24 µs gap between the client's wait and the second FETCH): its
    log file sync and its calls are its own, not the parent's disk time; it is linked to the parent;
    the parent's components still sum to its wall time and the profile to the file's span."""
    lines = (TRACES / "trctools_simple_trace.trc").read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "SQL*Net message from client" in line) + 1
    trace = tmp_path / "rec.trc"
    trace.write_text("".join(lines[:at]) + RECURSIVE_BETWEEN_FETCHES + "".join(lines[at:]))
    importer.import_files(tmp_path / "cap", [trace])
    correlate(tmp_path / "cap")
    (parent, wall), = q(tmp_path / "cap", "SELECT statement_id, end_ns - start_ns FROM statement WHERE nesting_level = 0")
    assert q(tmp_path / "cap", "SELECT parent_statement_id FROM statement WHERE nesting_level = 1") == [(parent,)]
    rec = q(tmp_path / "cap", "SELECT statement_id FROM statement WHERE nesting_level = 1")[0][0]
    assert q(tmp_path / "cap", "SELECT statement_id, top_statement_id, in_call, call_dep FROM dbms_wait "
                               "WHERE event = 'log file sync'") == [(rec, rec, True, 1)]
    comps = defaultdict(int, q(tmp_path / "cap", COMPONENTS_OF, [parent]))
    assert comps.get("disk_seq", 0) == 0 and sum(comps.values()) == wall
    # the recursive calls' e= (PARSE 5, EXEC 12, CLOSE 1 µs) are in the parent's window, not in its calls
    assert comps["client_wait"] == (186 + 223 + 5 + 12 + 1) * 1000
    db = profile.open_oracle(tmp_path / "cap")
    rows, total = profile.profile(db)
    first_start = 5793511830706 - 33
    assert total == (5793511831927 - first_start) * 1000
    assert {r.group: r.duration_ns for r in rows}["log file sync"] == 10_000


def test_literals_fold_into_one_query_id():
    a = normalized("select * from t where id = 42 and name = 'x''y'")
    b = normalized("SELECT *  FROM t WHERE id = 7 AND name = 'z'")
    assert a == b == "select * from t where id = ? and name = ?"
    assert normalized("select c1 from t1") != normalized("select c2 from t1")


def test_plan_operations_carry_their_disk_waits(capture):
    db = profile.open_oracle(capture)
    qid = q(capture, "SELECT DISTINCT s.query_id FROM statement s JOIN statement_text t USING (query_text_hash) "
                     "WHERE t.text = 'SELECT COUNT(*) EMP_COUNT FROM HR.EMPLOYEES'")[0][0]
    ops = {r[2]: r for r in profile.plan_rows(db, qid)}
    scan = ops["INDEX FULL SCAN EMP_EMAIL_UK"]
    waits = q(capture, "SELECT count(*), sum(ela_ns) FROM dbms_wait WHERE obj = 73207 AND component LIKE 'disk%' "
                       f"AND statement_id IN (SELECT statement_id FROM statement WHERE query_id = {qid})")[0]
    assert (scan[8], scan[9]) == waits and waits[0] > 0


def test_fetch_array_whatif(capture):
    db = profile.open_oracle(capture)
    qid = q(capture, "SELECT query_id FROM statement WHERE pid = 613102 GROUP BY query_id "
                     "ORDER BY sum(rows) DESC LIMIT 1")[0][0]
    w = {x.array_size: x for x in profile.fetch_whatif(db, qid, (100, 7))}
    rows_each = [r for (r,) in q(capture, f"""
        SELECT s.rows FROM statement s WHERE s.query_id = {qid} AND s.nesting_level = 0 AND EXISTS (
            SELECT 1 FROM dbms_call c WHERE c.node = s.node AND c.statement_id = s.statement_id AND c.call = 'FETCH')""")]
    assert w[100].fetches_after == sum(r // 100 + 1 for r in rows_each)
    # 14 rows at 7 a call: two full calls and the empty one that tells the client the rows are done
    assert 14 in rows_each and w[7].fetches_after == sum(r // 7 + 1 for r in rows_each)
    # the model (the client fetches until a call returns fewer rows than its array) against the raw
    # lines: each multi-fetch execution's FETCH count from its rows and its array (its largest r=)
    checked = 0
    for f in CLEAN:
        per_exec: dict = {}
        for line in f.read_text(errors="replace").splitlines():
            if m := re.match(r"^(EXEC|FETCH) (#\d+):.*,r=(\d+),", line):
                if m.group(1) == "EXEC":
                    per_exec[m.group(2)] = []
                elif m.group(2) in per_exec:
                    per_exec[m.group(2)].append(int(m.group(3)))
            elif m := re.match(r"^CLOSE (#\d+)", line):
                rs = per_exec.pop(m.group(1), [])
                if len(rs) > 1:
                    assert len(rs) == sum(rs) // max(rs) + 1, (f, rs)
                    checked += 1
    assert checked > 10
    assert w[100].fetches > w[100].fetches_after and w[100].saved_ns > 0
    assert w[100].saved_ns == (w[100].fetches - w[100].fetches_after) * w[100].base_ns
    assert 0 < w[100].base_ns <= w[100].trip_wait_ns


SQLNET_WAIT = re.compile(r"^WAIT #\d+: nam='(SQL\*Net [^']*)' ela= (\d+) driver id=\d+ #bytes=(\d+) ")


def raw_trips(path: Path) -> list[tuple[int, int, int, int]]:
    """(fetches, rows, bytes, cost µs) of each round trip that answered a dep=0 FETCH or a LOBREAD, read
    from the raw lines in their order: the SQL*Net waits to the client (#bytes of the more-data and
    vector-data ones) since the previous message from client, and the message from client ending it."""
    trips, sent, nbytes, fetches, rows, answered = [], 0, 0, 0, 0, False
    for line in path.read_text(errors="replace").splitlines():
        if m := SQLNET_WAIT.match(line):
            name, ela, b = m.group(1), int(m.group(2)), int(m.group(3))
            if name == "SQL*Net message from client":
                if answered:
                    trips.append((fetches, rows, nbytes, sent + ela))
                sent, nbytes, fetches, rows, answered = 0, 0, 0, 0, False
            elif name.endswith(" to client"):
                sent += ela
                nbytes += b if name != "SQL*Net message to client" else 0
        elif m := re.match(r"^FETCH #\d+:.*,r=(\d+),dep=0,", line):
            fetches, rows, answered = fetches + 1, rows + int(m.group(1)), True
        elif line.startswith("LOBREAD:"):
            answered = True
    return trips


def test_round_trip_cost_grows_with_the_bytes(capture):
    """jkstill/sqlnet's traces: each round trip's bytes (its more-data and vector-data packets) and its
    SQL*Net time, against the raw WAIT lines; the node's per-trip base and per-byte cost are the least
    squares line through them, computed here; and the cost grows with the bytes."""
    db = profile.open_oracle(capture)
    node = "ora112304a.jks.com"
    got = sorted(db.con.execute("SELECT fetches, rows, bytes, cost_ns // 1000 FROM client_trip WHERE node = ?",
                                [node]).fetchall())
    want = sorted(t for p in SQLNET for t in raw_trips(p))
    assert got == want and len(want) > 100
    # every more-data and vector-data packet of the files is in a trip
    packets = [int(m.group(3)) for p in SQLNET for line in p.read_text(errors="replace").splitlines()
               if (m := SQLNET_WAIT.match(line)) and m.group(1) in ("SQL*Net more data to client",
                                                                    "SQL*Net vector data to client")]
    assert sum(b for *_, b, _ in want) == sum(packets) and min(packets) > 100
    n = len(want)
    mx, my = sum(t[2] for t in want) / n, sum(t[3] * 1000 for t in want) / n
    slope = sum((t[2] - mx) * (t[3] * 1000 - my) for t in want) / sum((t[2] - mx) ** 2 for t in want)
    trips, nbytes, base, per_byte = db.con.execute(
        "SELECT trips, bytes, base_ns, ns_per_byte FROM trip_cost WHERE node = ?", [node]).fetchone()
    assert (trips, nbytes) == (n, sum(packets))
    assert per_byte == pytest.approx(slope) and abs(base - (my - slope * mx)) <= 1
    assert per_byte > 0 and 0 < base < my
    big = [t[3] for t in want if t[2] > 8000]   # trips of one more-data packet or more
    assert min(big) > base / 1000 and sum(big) / len(big) > 2 * my / 1000
    # a node whose trips all fit one packet: no slope, the base is their mean cost
    assert db.sql("SELECT ns_per_byte IS NULL AND base_ns = cost_ns // trips FROM trip_cost "
                  "WHERE bytes = 0").fetchall() == [(True,)]


def test_fetch_whatif_counts_the_calls_and_keeps_the_bytes(capture):
    """sqlplus fetching 106 rows as 1 + 105 (jkstill_js02_ora_23952): at an array of N the what-if makes
    106 // N + 1 calls (the trailing one included), against the raw FETCH lines; the bytes those calls
    carry and their per-byte cost stay; only the trips' base cost changes hands."""
    db = profile.open_oracle(capture)
    path = TRACES / "jkstill_js02_ora_23952_VARCHAR-10046.trc"
    lines = path.read_text(errors="replace").splitlines()
    start = next(i for i, line in enumerate(lines) if "sqlid='fwfwngu3123j4'" in line)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("CLOSE"))
    rs = [int(m.group(1)) for line in lines[start:end] if (m := re.match(r"^FETCH #\d+:.*,r=(\d+),dep=0,", line))]
    assert rs == [1, 105]
    qid = q(capture, "SELECT DISTINCT s.query_id FROM statement s JOIN dbms_call c ON c.node = s.node AND "
                     f"c.statement_id = s.statement_id WHERE c.file = {literal(str(path))} AND c.sql_id = 'fwfwngu3123j4'")[0][0]
    ws = profile.fetch_whatif(db, qid, (1, 10, 50, 200))
    assert [w.fetches_after for w in ws] == [sum(rs) // n + 1 for n in (1, 10, 50, 200)] == [107, 11, 3, 1]
    packets = sum(int(m.group(3)) for line in lines[start:end]
                  if (m := SQLNET_WAIT.match(line)) and m.group(1) == "SQL*Net more data to client")
    w = ws[-1]
    assert (w.fetches, w.rows, w.bytes) == (len(rs), sum(rs), packets) and packets > 5 * 8000
    assert w.saved_ns == (w.fetches - 1) * w.base_ns > 0
    assert w.byte_ns == round(packets * w.ns_per_byte) > w.base_ns
    assert all(x.saved_ns == 0 for x in ws[:-1])   # more calls than it made: nothing saved


def test_a_given_round_trip_splits_the_client_waits(capture):
    """With the client's round trip given (--rtt), each SQL*Net message from client is its round trip (at
    most the wait) and the client's think time: the two sum to the waits, the round trip part is each
    wait's min(ela, rtt) over the raw WAIT lines, and the fetch what-if gets its lower bound."""
    rtt_ms = 0.2
    waits = [int(m.group(1)) * 1000 for p in CLEAN for line in p.read_text(errors="replace").splitlines()
             if (m := re.match(r"^WAIT #\d+: nam='SQL\*Net (?:vector )?message from client' ela= (\d+) ", line))]
    assert len(waits) >= 30 and min(waits) < rtt_ms * 1e6 < max(waits)   # both sides of the split occur
    whole = {r.group: r for r in profile.profile(profile.open_oracle(capture))[0]}
    split = {r.group: r for r in profile.profile(profile.open_oracle(capture, rtt_ms=rtt_ms))[0]}
    name = "SQL*Net message from client"
    trip, think = split[f"{name}: round trip"], split[f"{name}: client think time"]
    assert name not in split and trip.count == think.count == whole[name].count == len(waits)
    assert trip.duration_ns + think.duration_ns == whole[name].duration_ns == sum(waits)
    assert trip.duration_ns == sum(min(w, round(rtt_ms * 1e6)) for w in waits)
    assert profile.profile(profile.open_oracle(capture, rtt_ms=rtt_ms))[1] == profile.profile(profile.open_oracle(capture))[1]
    db = profile.open_oracle(capture, rtt_ms=rtt_ms)
    qid = q(capture, "SELECT query_id FROM statement WHERE pid = 613102 GROUP BY query_id "
                     "ORDER BY sum(rows) DESC LIMIT 1")[0][0]
    w = profile.fetch_whatif(db, qid)[0]
    assert w.saved_rtt_ns == (w.fetches - w.fetches_after) * min(w.base_ns, round(rtt_ms * 1e6)) <= w.saved_ns
    with pytest.raises(MwinvError, match="--rtt -1"):
        profile.open_oracle(capture, rtt_ms=-1)


def test_report_and_advice_on_an_oracle_capture(capture, tmp_path):
    shutil.copytree(capture, tmp_path / "cap")
    r = run_cli(str(tmp_path / "cap"), "--report", str(tmp_path / "rep"), tool="mwinv-correlate")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "cursor cs_emp is select count(*)" in md
    assert "oracle.sleep" in md and "PL/SQL lock timer" in md
    assert "DBMS's own account" in md
    assert "pg_stat_activity" not in md


def test_corrupt_and_truncated_traces(tmp_path):
    broken = TRACES / "trctools_broken_trace.trc"
    r = run_cli("oracle", "import", str(broken), "-o", str(tmp_path / "b"))
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()[-1]
    assert err.startswith(f"mwinv: error: {broken}:49: malformed EXEC line") and "Traceback" not in r.stderr
    assert q(tmp_path / "b", "SELECT count(*) FROM statement")[0][0] >= 1   # what was read is kept
    # a good trace cut in the middle of a line: the last line is named, the rest imported
    cut = tmp_path / "cut.trc"
    text = JK[1].read_bytes()
    cut.write_bytes(text[:text.index(b"PL/SQL lock timer") + 40])
    r = run_cli("oracle", "import", str(cut), "-o", str(tmp_path / "c"))
    assert r.returncode == 2 and f"{cut}:" in r.stderr and "truncated" in r.stderr
    assert q(tmp_path / "c", "SELECT count(*) FROM statement")[0][0] > 5
    r = run_cli("oracle", "import", str(cut), "-o", str(tmp_path / "c2"), "--lenient")
    assert r.returncode == 0, r.stderr
    # not a trace at all
    junk = tmp_path / "junk.trc"
    junk.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(MwinvError, match="not an Oracle SQL trace"):
        parse(junk)
    r = run_cli("oracle", "import", str(junk), "-o", str(tmp_path / "j"))
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and last.startswith(f"mwinv: error: {junk}: not an Oracle SQL trace")
    assert "Traceback" not in r.stderr


def test_profile_cli_groups_and_filters(capture):
    r = run_cli("oracle", "profile", str(capture), "--where", "kind = 'wait'", "--group", "name", "--skew",
                "--format", "json")
    assert r.returncode == 0, r.stderr
    import json
    data = json.loads(r.stdout)
    waits = q(capture, "SELECT sum(ela_ns), count(*) FROM dbms_wait")[0]
    assert data["total_ns"] == waits[0]
    assert sum(row["count"] for row in data["rows"]) == waits[1]
    for row in data["rows"]:
        assert sum(b["count"] for b in row["histogram"]) == row["count"]
    r = run_cli("oracle", "profile", str(capture), "--where", "no_such_column > 1")
    assert r.returncode == 2 and "--group/--where" in r.stderr
    r = run_cli("oracle", "tkprof", str(capture), "--top", "2")
    assert r.returncode == 0 and "OVERALL TOTALS FOR ALL RECURSIVE STATEMENTS" in r.stdout


def test_tkprof_shows_sql_ids_plan_hashes_and_waits(tmp_path):
    """tkprof's identifiers (`SQL ID:`, `Plan Hash:`) from the PARSING IN CURSOR and call lines, and its
    "Elapsed times include waiting on following events" table, per statement and overall, against the
    raw WAIT lines (one file: three texts that fold into one query id, every wait on its cursor)."""
    path = TRACES / "trctools_two_statements_one_cursor.trc"
    text = path.read_text()
    importer.import_files(tmp_path / "cap", [path])
    r = run_cli("oracle", "tkprof", str(tmp_path / "cap"))
    assert r.returncode == 0, r.stderr
    ids = re.search(r"^SQL ID: (.*) Plan Hash: (.*)$", r.stdout, re.M)
    assert ids and sorted(ids.group(1).split(", ")) == sorted(set(re.findall(r"sqlid='(\w+)'", text)))
    assert sorted(ids.group(2).split(", ")) == sorted(set(re.findall(r"^PARSE #\d+:.*plh=(\d+)", text, re.M)))
    want: dict = {}
    for name, ela in re.findall(r"^WAIT #\d+: nam='(.*?)' ela= (\d+)", text, re.M):
        w = want.setdefault(name, [0, 0, 0])
        w[0], w[1], w[2] = w[0] + 1, max(w[1], int(ela)), w[2] + int(ela)
    tables = r.stdout.split("Elapsed times include waiting on following events:")
    assert len(tables) == 3          # the statement's, and the overall non-recursive totals
    for table in tables[1:]:
        got = {m.group(1): [int(m.group(2).replace(",", "")), round(float(m.group(3)) * 1e6),
                            round(float(m.group(4)) * 1e6)]
               for m in re.finditer(r"│ (\S[^│]*?)\s+│\s+([\d,]+) │\s+([\d.]+) │\s+([\d.]+) │", table.split("└")[0])}
        assert got == want
    assert q(tmp_path / "cap", "SELECT count(*) FROM dbms_call WHERE call = 'EXEC' AND sql_id IS NULL")[0][0] == 0


def test_session_hook_fails_in_one_line_without_a_server():
    """The hook is unverified against a live server (none runs here): what can be checked is that it
    refuses bad arguments and reports an unreachable server in one line."""
    r = run_cli("oracle", "trace", "--dsn", "127.0.0.1:9/XEPDB1", "--user", "perf", "--seconds", "1")
    assert r.returncode == 2 and "ORACLE_PASSWORD" in r.stderr
    import os
    env = {**os.environ, "ORACLE_PASSWORD": "x"}
    r = subprocess.run([str(BIN / "mwinv"), "oracle", "trace", "--dsn", "127.0.0.1:9/XEPDB1", "--user", "perf",
                        "--seconds", "1"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stderr.startswith("mwinv: error: 127.0.0.1:9/XEPDB1: cannot connect (DPY-")
    assert r.stderr.count("\n") == 1
    r = subprocess.run([str(BIN / "mwinv"), "oracle", "trace", "--dsn", "x", "--user", "u", "--sid", "1"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "--sid and --serial go together" in r.stderr


def test_kernel_side_of_the_traced_host(tmp_path):
    """The join with a kernel capture of the host, by the server process's pid and time: no Oracle server
    runs here, so a process replays the 12.2 session's timeline (tests/oracle_replay.py: c= busy, waits
    and unaccounted-for time asleep) under a real kernel capture; the real trace is imported into that
    capture, its statements land on the kernel's clock and are attributed from the kernel's events, and
    Oracle's unaccounted-for time is set against what the kernel saw. The time between calls is a real
    client's over TCP, so SQL*Net message from client is split at the round trip the kernel measured
    on the session's connection (checked against `ss` and the client's own echo times)."""
    from mwinv.node_capture import NodeCapture, wall_minus_mono
    from mwinv.options import CaptureOptions

    trace = JK[1]
    script = str(Path(__file__).parent / "oracle_replay.py")
    replay = subprocess.Popen([sys.executable, script, str(trace), "3", "--client"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    client = None
    try:
        port = int(replay.stdout.readline())
        client = subprocess.Popen([sys.executable, script, "--client", str(port)], stdout=subprocess.PIPE, text=True)
        echo_ns = int(client.stdout.readline())
        start_mono, first_us = map(int, replay.stdout.readline().split())
        cap = NodeCapture(tmp_path / "host", CaptureOptions(node="orahost", statements=False), pids=[replay.pid]).start()
        try:
            replay.stdin.write("go\n")
            replay.stdin.flush()
            assert replay.stdout.readline() == "done\n"
            ss = subprocess.run(["ss", "-tinH", f"( sport = :{port} )"],
                                capture_output=True, text=True).stdout
            replay.stdin.write("bye\n")
            replay.stdin.flush()
            assert replay.wait(timeout=60) == 0 and client.wait(timeout=10) == 0
        finally:
            cap.stop()
    finally:
        for proc in (replay, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
    tf = parse(trace)
    trace_wall_first = (first_us + tf.wall_offset_us()[0]) * 1000
    offset_s = (trace_wall_first - (start_mono + wall_minus_mono()["offset_ns"])) / 1e9
    r = run_cli("oracle", "import", str(trace), "-o", str(tmp_path / "host"), "--node", "orahost", "--pid",
                str(replay.pid), "--clock-offset", f"{offset_s:.9f}")
    assert r.returncode == 0, r.stderr
    db = correlate(tmp_path / "host")
    assert not [w for w in db.warnings if "outside" in w], db.warnings
    block = q(tmp_path / "host", """
        SELECT s.statement_id, s.end_ns - s.start_ns, s.cpu_user_ns FROM statement s
        WHERE s.nesting_level = 0 ORDER BY 2 DESC LIMIT 1""")[0]
    sid, wall, oracle_cpu = block
    comps = defaultdict(int, q(tmp_path / "host", COMPONENTS_OF, [sid]))
    assert sum(comps.values()) == wall
    # the kernel saw the replayed c= on the CPU and the sleeps (DBMS_LOCK.SLEEP, waits) off it
    kernel_cpu = comps["cpu_user"] + comps["cpu_sys"] + comps["run_queue"]
    assert abs(kernel_cpu - oracle_cpu) <= 0.25 * oracle_cpu + 15_000_000, (kernel_cpu, oracle_cpu)
    assert comps["other_wait"] + comps["not_allocated"] >= 4_900_000_000
    rows = {r["statement_id"]: r for r in profile.unaccounted_rows(profile.open_oracle(tmp_path / "host"))}
    split = rows[sid]
    # placed on CLOCK_MONOTONIC by an offset interpolated between the capture's two wall-mono readings:
    # a 5.4 s window stretches by that drift (a few ns), nothing more
    assert abs(split["unaccounted_ns"] - oracle_unaccounted(trace)) <= 1_000
    assert split["run_queue_ns"] + split["cpu_missed_ns"] + split["io_outside_waits_ns"] + split["rest_ns"] \
        == split["unaccounted_ns"]
    assert split["kernel_cpu_ns"] == comps["cpu_user"] + comps["cpu_sys"]
    r = run_cli("oracle", "unaccounted", str(tmp_path / "host"))
    assert r.returncode == 0 and "split by the kernel" in r.stdout
    # the session's connection as the kernel accounts it: the replay's side was accepted on its port
    tcp = q(tmp_path / "host", f"SELECT min(min_rtt_ns), count(*) FROM tcp_sample WHERE pid = {replay.pid} "
                               f"AND accepted AND local LIKE '%:{port}'")[0]
    rtt, samples = tcp
    assert samples >= 3, tcp
    ss_rtt = round(float(re.search(r"minrtt:([0-9.]+)", ss).group(1)) * 1e6)   # ms, as ss prints it
    assert 0 < ss_rtt <= rtt <= echo_ns, (ss_rtt, rtt, echo_ns, ss)
    r = run_cli("oracle", "profile", str(tmp_path / "host"), "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["client_rtt"] == [{"node": "orahost", "pid": replay.pid, "rtt_ns": rtt, "source": "kernel"}]
    waits = [w for w in parse(trace).waits if w.name == "SQL*Net message from client"]
    rows = {row["group"]: row for row in out["rows"]}
    trip = rows["SQL*Net message from client: round trip"]
    assert trip["count"] == len(waits) and trip["duration_ns"] == sum(min(w.ela * 1000, rtt) for w in waits)
    think = rows["SQL*Net message from client: client think time"]
    assert think["duration_ns"] + trip["duration_ns"] == sum(w.ela * 1000 for w in waits)
    r = run_cli("oracle", "profile", str(tmp_path / "host"), "--rtt", "0.4")
    assert r.returncode == 0 and "split at a round trip of 400.0 µs: given (--rtt)" in r.stdout, r.stdout
    r = run_cli("capture", str(tmp_path / "x"), "--pids", "9854,x", tool="mwinv-trace")
    assert r.returncode == 2 and "--pids '9854,x': a comma-separated list of process ids" in r.stderr


def test_advice_lines_are_cut_between_words(tmp_path):
    """The terminal shortens an advice line to 150 characters (--report has it whole): between words,
    never inside one (the PL/SQL block's sleep advice was cut to '... look at why it w…')."""
    importer.import_files(tmp_path / "cap", [JK[1]])
    r = subprocess.run([str(BIN / "mwinv-correlate"), str(tmp_path / "cap")], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "250"})
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("#1 oracle.sleep"))
    full = duckdb.sql(f"SELECT advice FROM {parts(tmp_path / 'cap', 'statement_advice')} "
                      "WHERE rule = 'oracle.sleep'").fetchone()[0].split()
    shown = line.split(") ", 1)[1]
    assert len(full) > len(shown.split()) - 1 and shown.endswith(" …")
    assert shown[:-2].split() == full[:len(shown.split()) - 1]


def test_advice_states_its_base(tmp_path):
    """Advice shares are of the time in the database (the executions' windows less their client waits),
    where the top table's total holds the client waits too: the evidence says which, with the client
    waits left out (those of the query's executions the evidence sums): on the traces with one such advice."""
    importer.import_files(tmp_path / "cap", [p for p in CLEAN if p not in SQLNET])
    r = run_cli("--top-sql", "10", str(tmp_path / "cap"), tool="mwinv-correlate")
    assert r.returncode == 0, r.stderr
    (qid, evidence), = duckdb.sql(f"SELECT query_id, evidence FROM {parts(tmp_path / 'cap', 'statement_advice')} "
                                  "WHERE rule = 'oracle.unaccounted'").fetchall()
    m = re.search(r"unaccounted-for ([\d,.]+) ms of ([\d,.]+) ms in the database \(client waits, ([\d,.]+) ms, "
                  r"excluded\)", evidence)
    assert m, evidence
    client = q(tmp_path / "cap", f"SELECT sum(client_wait_ns) FROM statement WHERE query_id = {qid}")[0][0]
    assert 0 < float(m.group(3).replace(",", "")) <= client / 1e6 + 0.05
    # the terminal says which advice sums several executions (the heading spoke of the longest only)
    summed = duckdb.sql(f"SELECT rule, evidence FROM {parts(tmp_path / 'cap', 'statement_advice')} "
                        "WHERE evidence LIKE 'over %'").fetchall()
    assert summed and "all its executions summed" in " ".join(r.stdout.split())
    for rule, ev in summed:
        assert re.search(rf"^#\d+ {re.escape(rule)} \({ev.split(':', 1)[0]}, ", r.stdout, re.M), r.stdout
