"""A duty-cycled capture (`mwinv-trace capture --duty`): kernel events on in windows, off between, the
statements always. The events lie in the windows, the windows are in the capture, only statements a
window covers whole are attributed from the kernel (and sum to their wall time), and the pgbench
statement's shares over them agree with a full capture of the same load."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mwinv.node_capture import NodeCapture
from mwinv.options import CaptureOptions
from mwinv.capture.tables import ATTRIBUTION_COMPONENTS
from mwinv.correlator.load import literal
from mwinv.correlator.pipeline import correlate, top_statements
from mwinv.correlator.report import load
from mwinv.engines.postgresql.server import PgServer, pg_bindir
from mwinv.kernel_trace.recorder import KernelRecorder

MWINV_TRACE = str(Path(sys.executable).parent / "mwinv-trace")


@pytest.fixture(scope="module")
def server():
    with PgServer(name="duty", shared_preload_libraries=["mwinv"], gucs={"compute_query_id": "on"}) as srv:
        srv.psql("CREATE EXTENSION mwinv")
        _pgbench(srv, "-i", "-q", "-s", "1")
        yield srv


def _pgbench(srv: PgServer, *args: str) -> None:
    subprocess.run([str(pg_bindir() / "pgbench"), *args, "-h", str(srv.socket_dir), "-p", str(srv.port),
                    "-U", "postgres", "postgres"], check=True, capture_output=True)


def _captured(srv: PgServer, out: Path, **kw):
    with NodeCapture(out, CaptureOptions(node="n1", **kw), postmaster_pid=srv.postmaster_pid(),
                     conninfo=srv.conninfo()) as cap:
        _pgbench(srv, "-n", "-S", "-M", "prepared", "-c", "2", "-j", "2", "-T", "4")
    assert not cap.summary.get("errors"), cap.summary
    return cap.summary, correlate(out, write=False)


def _select_shares(db) -> dict[str, float]:
    rows = db.sql("""
        SELECT component, sum(ns) FROM statement_attribution a JOIN traced_statement USING (node, statement_id)
        JOIN statement_text t USING (query_id) WHERE t.text LIKE 'SELECT abalance%' GROUP BY ALL""").fetchall()
    total = sum(ns for _, ns in rows)
    return {c: ns / total for c, ns in rows}


def test_events_only_in_windows_and_shares_as_a_full_capture(server, tmp_path):
    summary, db = _captured(server, tmp_path / "duty", duty=0.25, window_s=0.4)
    windows = summary["recorder"]["windows"]
    assert 2 <= len(windows) <= 4, windows
    assert all(0.39e9 <= hi - lo <= 0.8e9 for lo, hi in windows[:-1]), windows   # the last: cut by the stop
    assert 0 < windows[-1][1] - windows[-1][0] <= 0.8e9, windows
    assert all(b[0] - a[1] >= 1.0e9 for a, b in zip(windows, windows[1:])), windows   # 3 x 0.4 s off
    assert sorted(map(list, db.sql("SELECT lo, hi FROM trace_window").fetchall())) == sorted(windows)
    # nothing recorded while every event was off (switching them one by one takes a while)
    off = summary["recorder"]["off"]
    assert len(off) >= len(windows) - 1 and all(b - a >= 0.5e9 for a, b in off), off
    gaps = " OR ".join(f"ts_ns BETWEEN {literal(a)} AND {literal(b)}" for a, b in off)
    assert db.sql(f"SELECT count(*) FROM kernel_event WHERE {gaps}").fetchone()[0] == 0

    traced, total, outside = db.sql(f"""
        SELECT count(t.statement_id), count(*),
               count(t.statement_id) FILTER (WHERE NOT ({" OR ".join(
                   f"(s.start_ns >= {literal(lo)} AND s.end_ns <= {literal(hi)})" for lo, hi in windows)}))
        FROM statement_clean s LEFT JOIN traced_statement t USING (node, statement_id)""").fetchone()
    assert 0 < traced < total and outside == 0, (traced, total, outside)
    assert traced / total < 0.5   # a quarter of the time traced: not most statements
    # a traced statement's components sum to its wall time; one in a gap has no kernel-side component
    assert db.sql("""
        SELECT count(*) FROM (SELECT a.statement_id, sum(a.ns) AS got, any_value(s.end_ns - s.start_ns) AS wall
            FROM statement_attribution a JOIN traced_statement USING (node, statement_id)
            JOIN statement_clean s USING (node, statement_id) GROUP BY a.node, a.statement_id)
        WHERE got <> wall""").fetchone()[0] == 0
    kernel_only = ("run_queue", "disk_random", "disk_seq", "network", "lock_wait", "other_wait", "remote_wait")
    assert db.sql(f"""
        SELECT coalesce(sum(a.ns), 0) FROM statement_attribution a
        LEFT JOIN traced_statement t USING (node, statement_id)
        WHERE t.statement_id IS NULL AND a.component IN ({', '.join(map(literal, kernel_only))})""").fetchone()[0] == 0
    # the report: the pgbench statement's breakdown comes from its traced executions, scaled to all of
    # them (its untraced ones, without rusage below the cost threshold, are all not_allocated)
    correlate(tmp_path / "duty")
    data = load(tmp_path / "duty")
    assert data.duty_cycled and any("duty-cycled" in m for m in data.missing)
    (q,) = [q for q in data.queries if data.texts.get(q["query_text_hash"], "").startswith("SELECT abalance")]
    assert 0 < q["traced_calls"] < q["calls"]
    parts = sum(q[c] for c in ATTRIBUTION_COMPONENTS)
    assert abs(parts - q["total_ns"]) <= len(ATTRIBUTION_COMPONENTS), (parts, q["total_ns"])
    assert q["not_allocated"] <= 0.05 * q["total_ns"], q

    _, full = _captured(server, tmp_path / "full")
    duty_shares, full_shares = _select_shares(db), _select_shares(full)
    top = max(full_shares, key=full_shares.get)
    assert abs(duty_shares.get(top, 0) - full_shares[top]) <= 0.10, (duty_shares, full_shares)


def test_an_event_budget_lowers_the_duty_says_so_and_records_it(server, tmp_path):
    """`mwinv-trace capture` under pgbench -S (~500,000 events/s per CPU here) with a budget of 5,000:
    the first window's rate is over four times the budget, so the capture goes to one window in k at
    once, prints it, and records it in the manifest; the correlation then treats the capture as
    duty-cycled (its first window may be its only one) and ranks the statement by its traced executions."""
    out = tmp_path / "budget"
    bench = subprocess.Popen([str(pg_bindir() / "pgbench"), "-n", "-S", "-M", "prepared", "-c", "2", "-j", "2", "-T", "6",
                             "-h", str(server.socket_dir), "-p", str(server.port), "-U", "postgres", "postgres"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        res = subprocess.run([MWINV_TRACE, "capture", str(out), "--pid", str(server.postmaster_pid()),
                              "--conninfo", server.conninfo(), "--duration", "4", "--window", "0.5",
                              "--event-budget", "5000", "--node", "n1"], capture_output=True, text=True, timeout=120)
    finally:
        bench.wait(30)
    assert res.returncode == 0, res.stderr
    (change,) = json.loads((out / "manifest.json").read_text())["nodes"]["n1"]["duty_changes"]
    k = round(1 / change["duty"])
    assert change["events_per_s_per_cpu"] > 4 * 5000 and k == min(100, -(-change["events_per_s_per_cpu"] // 5000))
    assert f"over the budget of 5,000: traced one window in {k} (in the manifest)" in res.stderr, res.stderr
    recorder = json.loads((out / "kernel" / "n1" / "recorder.json").read_text())
    (first, *rest) = recorder["windows"]
    assert 0.45e9 <= first[1] - first[0] <= 1.5e9 and not rest, recorder["windows"]   # 1 s in k >= 8: one window in 4 s

    db = correlate(out, write=True)
    assert db.duty_cycled and not any("outside the kernel trace" in w for w in db.warnings), db.warnings
    (top,) = [s for s in top_statements(db, n=5) if s.text.startswith("SELECT abalance")]
    assert 0 < top.traced_calls < top.calls
    assert top.components["not_allocated"] <= 0.05 * top.total_ns, top.components
    data = load(out)
    assert any(m.startswith("Node n1, at +") and f"kernel events at {change['events_per_s_per_cpu']:,}/s per CPU" in m
               for m in data.missing), data.missing


def test_within_the_budget_every_event_is_kept(server, tmp_path):
    """The same load with a budget far above its rate: one window throughout, nothing changed."""
    summary, db = _captured(server, tmp_path / "within", event_budget=1e9, window_s=0.5)
    assert summary["recorder"]["duty_changes"] == [] and len(summary["recorder"]["windows"]) == 1
    assert not db.duty_cycled


def test_stacks_sample_the_cpu_in_the_windows_only(server, tmp_path):
    """With --stacks, perf's CPU samples are switched off and on with the events (its control pipe):
    samples in every window, none while the events were off."""
    summary, db = _captured(server, tmp_path / "stacks", duty=0.25, window_s=0.4, stacks=True)
    rec = summary["recorder"]
    if not rec["perf"]:
        pytest.skip("perf is not available here")
    off = [w for w in rec["off"] if w[1] - w[0] > 0]
    assert off, rec
    gaps = " OR ".join(f"ts_ns BETWEEN {literal(a)} AND {literal(b)}" for a, b in off)
    assert db.sql(f"SELECT count(*) FROM cpu_sample WHERE {gaps}").fetchone()[0] == 0
    # a window the stop cut after pgbench had ended holds no work to sample: judged are the windows in
    # which the server ran statements (failed once on a busy host with a last window of 0.41 s)
    busy = [(lo, hi) for lo, hi in rec["windows"]
            if db.sql(f"SELECT count(*) FROM statement WHERE start_ns BETWEEN {literal(lo)} AND {literal(hi)}"
                      ).fetchone()[0] >= 100]
    assert len(busy) >= 2, rec["windows"]
    for lo, hi in busy:
        assert db.sql(f"SELECT count(*) FROM cpu_sample WHERE ts_ns BETWEEN {literal(lo)} AND {literal(hi)}"
                      ).fetchone()[0] > 0, (lo, hi)


def test_over_the_budget_long_statements_keep_every_event(server, tmp_path):
    """Statements longer than a tenth of a window (here 0.1 s sleeps, 0.4 s windows) keep every event
    even over the budget: a window would cover few of them whole. Said once, recorded, not cycled."""
    script = tmp_path / "sleep.sql"
    script.write_text("SELECT pg_sleep(0.1);\n")
    out = tmp_path / "long"
    with NodeCapture(out, CaptureOptions(node="n1", event_budget=0.001, window_s=0.4),
                     postmaster_pid=server.postmaster_pid(), conninfo=server.conninfo()) as cap:
        _pgbench(server, "-n", "-f", str(script), "-c", "2", "-j", "2", "-T", "3")
    rec = cap.summary["recorder"]
    (change,) = rec["duty_changes"]
    # the sleeps' median once the drainer has read some; before its first read, the time since the capture
    # began (608.7 ms once on a loaded CI host): either way above the window's tenth
    assert change["duty"] == 1 and change["statement_median_ms"] >= 100, change
    assert len(rec["windows"]) == 1 and not rec["off"]
    db = correlate(out, write=False)
    assert not db.duty_cycled
    assert db.sql("SELECT count(*) FROM traced_statement").fetchone()[0] >= 40


def test_a_duty_cycle_that_fails_is_said_and_leaves_the_events_on(server, tmp_path, monkeypatch):
    """A failure in the duty cycle (here the one a process followed meanwhile caused: the pid dict
    changed size while the events were switched back on) ended its thread in silence, the events off
    for the rest of the capture: a 600 s capture's windows stopped after 39 s. Now it is recorded, said
    in the manifest and by the correlation, and the rest of the capture is one window."""
    switch = KernelRecorder._switch_events
    ons = []

    def failing_once(self, on):
        ons.append(on)
        if on == "1" and ons.count("1") == 1:
            raise RuntimeError("dictionary changed size during iteration")
        return switch(self, on)

    monkeypatch.setattr(KernelRecorder, "_switch_events", failing_once)
    summary, db = _captured(server, tmp_path / "failed", duty=0.25, window_s=0.4)
    assert summary["recorder"]["errors"] == [
        "duty cycle stopped: RuntimeError('dictionary changed size during iteration')"]
    first, rest = summary["recorder"]["windows"]
    assert first[1] - first[0] < 0.8e9 and rest[1] - rest[0] > 1.5e9, summary["recorder"]["windows"]   # to the stop
    # and the events were on in it, not only said to be: switches of the backends throughout
    late = db.sql("SELECT count(*) FROM kernel_event WHERE event = 'sched_switch' "
                  f"AND ts_ns > {literal(rest[0] + 1_000_000_000)}").fetchone()[0]
    assert late > 100, late
    info = json.loads((tmp_path / "failed" / "manifest.json").read_text())["nodes"]["n1"]
    assert "duty cycle stopped" in info["kernel_errors"]
    assert any(w.startswith("node n1: kernel recorder: duty cycle stopped") for w in db.warnings), db.warnings
