"""make_capture_from_run: a real capture for the model/report tests, built without the correlator.

Statements run one after another, each in its own backend (max_parallel_workers_per_gather = 0, so
one pid holds all its work; a fresh backend lets before_each restart the server for cold runs). Per statement, measured on the real server:
- wall time: CLOCK_MONOTONIC around the statement;
- on-CPU and run-queue time: /proc/<pid>/schedstat deltas (ns); user/system split by the utime/stime
  tick deltas of /proc/<pid>/stat;
- on/off-CPU intervals for the report: sched_switch of the backends (kernel_event table);
- disk: block_rq_issue/block_rq_complete tracepoints in a private tracefs instance (mono clock); the
  backend's requests are classified sequential when they start within 256 sectors after the previous
  request's end, random otherwise; disk time is the union of the requests' in-flight intervals,
  capped at the wall time left after CPU and run queue (I/O overlapping CPU counts once);
- the rest is not_allocated.
The correlator (issue 6) replaces this with the real attribution: switch `make_capture_from_run` to it
once `mwinv.correlator.attribution` exists."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
import uuid
from pathlib import Path

from mwinv.capture.tables import Capture
from mwinv.correlator.calibrate import calibrate_cpu, calibrate_disk, calibrate_link

TRACEFS = Path("/sys/kernel/tracing")
SEQ_GAP_SECTORS = 256
_SWITCH = re.compile(r"^\s*.+-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+): sched_switch: .*prev_pid=(?P<prev>\d+) "
                     r".*prev_state=(?P<state>\S+) ==> .*next_pid=(?P<next>\d+)")
_LINE = re.compile(r"^\s*(?P<comm>.+)-(?P<pid>\d+)\s+\[\d+\]\s+\S+\s+(?P<ts>\d+\.\d+): (?P<event>block_rq_\w+): "
                   r"(?P<maj>\d+),(?P<min>\d+) (?P<rwbs>\S+) (?:(?P<bytes>\d+) )?\(.*?\) (?P<sector>\d+) \+ (?P<nr>\d+)")


def tracefs_usable() -> str | None:
    """None if a tracefs instance with block events can be made, else why not."""
    if os.geteuid() != 0:
        return "needs root for tracefs"
    if not (TRACEFS / "instances").is_dir():
        return f"tracefs is not mounted at {TRACEFS}"
    if not (TRACEFS / "events/block/block_rq_issue").is_dir():
        return "block tracepoints missing"
    return None


class KernelTrace:
    """block_rq_issue/complete and postgres' sched_switch in a private instance; always removed."""

    def __init__(self):
        self.dir = TRACEFS / "instances" / f"mwinv-modeltest-{uuid.uuid4().hex[:8]}"

    def __enter__(self):
        self.dir.mkdir()
        try:
            (self.dir / "trace_clock").write_text("mono")
            (self.dir / "buffer_size_kb").write_text("8192")
            for ev in ("block_rq_issue", "block_rq_complete"):
                (self.dir / f"events/block/{ev}/enable").write_text("1")
            switch = self.dir / "events/sched/sched_switch"
            (switch / "filter").write_text('prev_comm == "postgres" || next_comm == "postgres"')
            (switch / "enable").write_text("1")
            (self.dir / "tracing_on").write_text("1")
        except BaseException:
            self.dir.rmdir()
            raise
        return self

    def read(self) -> tuple[list[dict], list[dict]]:
        """(block events, sched_switch rows of the kernel_event table)."""
        (self.dir / "tracing_on").write_text("0")
        out, switches = [], []
        for line in (self.dir / "trace").read_text().splitlines():
            s = _SWITCH.match(line)
            if s:
                switches.append({"ts_ns": round(float(s["ts"]) * 1e9), "cpu": int(s["cpu"]), "pid": int(s["pid"]),
                                 "event": "sched_switch", "prev_pid": int(s["prev"]), "prev_state": s["state"],
                                 "next_pid": int(s["next"])})
                continue
            m = _LINE.match(line)
            if m:
                out.append({"pid": int(m["pid"]), "ts_ns": round(float(m["ts"]) * 1e9), "event": m["event"],
                            "dev": f"{m['maj']}:{m['min']}", "rwbs": m["rwbs"], "sector": int(m["sector"]),
                            "nr": int(m["nr"])})
        return out, switches

    def __exit__(self, *exc):
        (self.dir / "tracing_on").write_text("0")
        for ev in ("block/block_rq_issue", "block/block_rq_complete", "sched/sched_switch"):
            (self.dir / f"events/{ev}/enable").write_text("0")
        self.dir.rmdir()


def backend_requests(events: list[dict], pid: int) -> list[dict]:
    """The backend's read/write requests with issue and completion times."""
    pending: dict[tuple, dict] = {}
    reqs = []
    for e in events:
        key = (e["dev"], e["sector"])
        if e["event"] == "block_rq_issue" and e["pid"] == pid and e["nr"] > 0:
            r = {"issue_ns": e["ts_ns"], "sector": e["sector"], "nr": e["nr"], "write": "W" in e["rwbs"],
                 "complete_ns": None}
            pending[key] = r
            reqs.append(r)
        elif e["event"] == "block_rq_complete" and key in pending:
            pending.pop(key)["complete_ns"] = e["ts_ns"]
    return [r for r in reqs if r["complete_ns"] is not None]


def _stable_id(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") >> 1


def _union(intervals: list[tuple[int, int]]) -> int:
    total, cur_a, cur_b = 0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    return total + (cur_b - cur_a if cur_b is not None else 0)


def _schedstat(pid: int) -> tuple[int, int]:
    run, wait, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(run), int(wait)


def _ticks(pid: int) -> tuple[int, int]:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]), int(f[12])  # utime, stime


def _proc_io(pid: int) -> dict[str, int]:
    return {k: int(v) for k, v in (l.split(": ") for l in Path(f"/proc/{pid}/io").read_text().splitlines())}


class NodeSampler(threading.Thread):
    """/proc/stat and /proc/diskstats every `interval` seconds (the node_sample table)."""

    def __init__(self, node: str, device: str, interval: float = 0.2):
        super().__init__(daemon=True)
        self.node, self.device, self.interval = node, device, interval
        self.rows: list[dict] = []
        self.stop_event = threading.Event()

    def _read(self):
        cpu = [int(x) * 10_000_000 for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        maj, mnr = self.device.split(":")
        disk = next(l.split() for l in Path("/proc/diskstats").read_text().splitlines()
                    if l.split()[0] == maj and l.split()[1] == mnr)
        return time.monotonic_ns(), cpu, disk

    def run(self):
        prev = self._read()
        while not self.stop_event.wait(self.interval):
            cur = self._read()
            (t0, c0, d0), (t1, c1, d1) = prev, cur
            dc = [b - a for a, b in zip(c0, c1)]
            self.rows.append({"node": self.node, "ts_ns": t1, "interval_ns": t1 - t0, "cpu_user_ns": dc[0] + dc[1],
                              "cpu_sys_ns": dc[2] + dc[5] + dc[6], "cpu_iowait_ns": dc[4], "cpu_idle_ns": dc[3],
                              "disk": d1[2], "read_bytes": (int(d1[5]) - int(d0[5])) * 512,
                              "write_bytes": (int(d1[9]) - int(d0[9])) * 512,
                              "read_reqs": int(d1[3]) - int(d0[3]), "write_reqs": int(d1[7]) - int(d0[7])})
            prev = cur


def make_capture_from_run(server, statements: list[tuple], capture_dir, dbname: str = "tpch",
                          node: str = "node0", before_each=None, calibration: dict | None = None,
                          settings: dict | None = None, on_backend=None) -> Capture:
    """Run (label, sql[, {guc: value}]) one by one, each in a fresh backend, and write a capture with statement, statement_text,
    statement_attribution, statement_io, kernel_event (sched_switch), node_sample and the calibration.
    before_each(label) runs before each statement (e.g. to drop the page cache and restart);
    on_backend(label, pid) runs once the statement's backend is known."""
    from mwinv.cgroup import block_device_of

    if Capture(capture_dir).manifest_path.exists():
        raise FileExistsError(f"{capture_dir}: already a capture (statement ids would collide)")
    cap = Capture(capture_dir).create(run=Path(capture_dir).name, nodes={node: {}}, cpus=os.cpu_count(),
                                      settings=settings or {})
    device = block_device_of(server.data_dir)
    if calibration is None:
        calibration = {"disk": calibrate_disk(server.data_dir, file_mb=64), "cpu": calibrate_cpu(),
                       "links": {"127.0.0.1": calibrate_link("127.0.0.1", bulk_mb=32, pings=200)}}
    cap.update_manifest(calibration=calibration)
    rows, texts, attribution, ios = [], {}, [], []
    sampler = NodeSampler(node, device)
    sampler.start()
    windows = []
    try:
        with KernelTrace() as trace:
            for i, (label, sql, *gucs) in enumerate(statements):
                if before_each:
                    before_each(label)  # may restart the server: every statement gets its own backend
                with server.connect(dbname) as conn:
                    for k, v in {"max_parallel_workers_per_gather": "0", **(settings or {}),
                                 **(gucs[0] if gucs else {})}.items():
                        conn.execute(f"SET {k} = {v}")
                    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                    if on_backend:
                        on_backend(label, pid)  # e.g. move it into a throttled cgroup
                    s0, t0, io0 = _schedstat(pid), _ticks(pid), _proc_io(pid)
                    start = time.monotonic_ns()
                    cur = conn.execute(sql)
                    n = len(cur.fetchall()) if cur.description else 0
                    end = time.monotonic_ns()
                    s1, t1, io1 = _schedstat(pid), _ticks(pid), _proc_io(pid)
                windows.append((i, label, sql, pid, start, end, s1[0] - s0[0], s1[1] - s0[1],
                                t1[0] - t0[0], t1[1] - t0[1], io1, io0, n))
            events, switches = trace.read()
    finally:
        sampler.stop_event.set()
        sampler.join()
    for i, label, sql, pid, start, end, run_ns, rq_ns, ut, st, io1, io0, n in windows:
        sid = i + 1
        qhash, qid = _stable_id(sql), _stable_id(label)
        texts[qhash] = {"query_text_hash": qhash, "query_id": qid, "text": sql}
        wall = end - start
        cpu = min(run_ns, wall)
        user = round(cpu * ut / (ut + st)) if ut + st else cpu
        mine = [r for r in backend_requests(events, pid) if start <= r["issue_ns"] < end and not r["write"]]
        seq, rnd, prev_end = [], [], None
        for r in sorted(mine, key=lambda r: r["issue_ns"]):
            sequential = prev_end is not None and 0 <= r["sector"] - prev_end <= SEQ_GAP_SECTORS
            (seq if sequential or prev_end is None and r["nr"] >= 64 else rnd).append(r)
            prev_end = r["sector"] + r["nr"]
        u_seq = _union([(r["issue_ns"], min(r["complete_ns"], end)) for r in seq])
        u_rnd = _union([(r["issue_ns"], min(r["complete_ns"], end)) for r in rnd])
        rq = min(rq_ns, wall - cpu)
        room = wall - cpu - rq
        scale = min(1.0, room / (u_seq + u_rnd)) if u_seq + u_rnd else 0.0
        d_seq, d_rnd = round(u_seq * scale), round(u_rnd * scale)
        comps = {"cpu_user": user, "cpu_sys": cpu - user, "disk_seq": d_seq, "disk_random": d_rnd,
                 "run_queue": rq, "not_allocated": wall - cpu - rq - d_seq - d_rnd}
        for c, ns in comps.items():
            attribution.append({"node": node, "statement_id": sid, "query_id": qid, "component": c, "ns": ns,
                                "from_workers_ns": 0})
        ios.append({"node": node, "statement_id": sid, "seq_bytes": sum(r["nr"] * 512 for r in seq),
                    "seq_reqs": len(seq), "random_reqs": len(rnd), "random_bytes": sum(r["nr"] * 512 for r in rnd),
                    "net_rx_bytes": 0, "net_tx_bytes": 0})
        rows.append({"node": node, "dbms": "postgresql", "pid": pid, "leader_pid": None, "statement_id": sid,
                     "query_id": qid, "query_text_hash": qhash, "database": dbname, "start_ns": start, "end_ns": end,
                     "cpu_user_ns": ut * 10_000_000, "cpu_sys_ns": st * 10_000_000,
                     "read_bytes": io1["read_bytes"] - io0["read_bytes"],
                     "write_bytes": io1["write_bytes"] - io0["write_bytes"], "rows": n, "nesting_level": 0,
                     "errored": False})
    cap.write_part("statement", rows, node=node)
    cap.write_part("statement_text", list(texts.values()), node=node)
    cap.write_part("statement_attribution", attribution, node=node)
    cap.write_part("statement_io", ios, node=node)
    backend_pids = {w[3] for w in windows}
    switches = [dict(s, node=node) for s in switches if s["prev_pid"] in backend_pids or s["next_pid"] in backend_pids]
    if switches:
        cap.write_part("kernel_event", switches, node=node)
    if sampler.rows:
        cap.write_part("node_sample", sampler.rows, node=node)
    return cap


def calibrate_disk_in_cgroup(cgroup, directory, file_mb: int = 16) -> dict:
    """calibrate_disk run by a process inside `cgroup`: the disk factors of the throttled platform."""
    import json
    import subprocess
    import sys

    root = str(Path(__file__).parent.parent)
    out = subprocess.run(cgroup.exec_prefix() + [
        sys.executable, "-c", "import json, sys; from mwinv.correlator.calibrate import calibrate_disk; "
        f"print(json.dumps(calibrate_disk(sys.argv[1], file_mb={int(file_mb)}, random_reads=100)))", str(directory)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root}, timeout=300, check=True).stdout
    return json.loads(out)
