"""make_capture_from_run: a real capture for the model/report tests, made by the real pipeline.

Statements run one after another, each in its own backend (max_parallel_workers_per_gather = 0 unless
a statement sets it, so one pid holds all its work), on a server with the mwinv extension preloaded,
inside a NodeCapture (kernel events, samples, the extension's statements); the capture is then
correlated (statement_attribution, statement_io) and calibrated. Settings travel in the connection's
startup options, so the capture holds exactly the statements given."""

from __future__ import annotations

import os
import subprocess
import uuid
from contextlib import contextmanager
from pathlib import Path

from mwinv.node_capture import NodeCapture
from mwinv.options import CaptureOptions
from mwinv.capture.tables import Capture
from mwinv.calibrate import calibrate_cpu, calibrate_disk, calibrate_link
from mwinv.correlator.pipeline import correlate
from mwinv.engines.postgresql.reader import connect_untracked

def make_capture_from_run(server, statements: list[tuple], capture_dir, dbname: str = "tpch",
                          node: str = "node0", before_each=None, calibration: dict | None = None,
                          settings: dict | None = None, on_backend=None) -> Capture:
    """Run (label, sql[, {guc: value}]) one by one, each in a fresh backend, under a real capture.
    before_each(label) runs before each statement (e.g. to drop the page cache); on_backend(label, pid)
    runs once the statement's backend is known (e.g. to move it into a throttled cgroup)."""
    if Capture(capture_dir).manifest_path.exists():
        raise FileExistsError(f"{capture_dir}: already a capture (statement ids would collide)")
    with connect_untracked(server.conninfo(dbname)) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS mwinv")
        conn.execute("SELECT mwinv_reset()")  # only this run's statements
    if calibration is None:
        calibration = {"disk": calibrate_disk(server.data_dir, file_mb=64), "cpu": calibrate_cpu(),
                       "links": {"127.0.0.1": calibrate_link("127.0.0.1", bulk_mb=32, pings=200)}}
    # samples every 50 ms: on a fast machine a few warm queries take well under a second, and the
    # report's node timelines need two samples or more to draw a line
    with NodeCapture(capture_dir, CaptureOptions(node=node, sample_interval_s=0.05),
                     postmaster_pid=server.postmaster_pid(), conninfo=server.conninfo(dbname)):
        for label, sql, *gucs in statements:
            if before_each:
                before_each(label)
            options = {"max_parallel_workers_per_gather": "0", **(settings or {}), **(gucs[0] if gucs else {})}
            with server.connect(dbname, options=" ".join(f"-c {k}={v}" for k, v in options.items())) as conn:
                if on_backend:
                    on_backend(label, conn.info.backend_pid)
                cur = conn.execute(sql)
                if cur.description:
                    cur.fetchall()
    cap = Capture(capture_dir)
    cap.update_manifest(calibration=calibration, settings=settings or {}, cpus=os.cpu_count())
    correlate(capture_dir)
    return cap


def sql_key(text: str) -> str:
    """A statement's text as the extension stores it: without the trailing semicolon and blanks."""
    return text.strip().rstrip(";").strip()


def statement_ids(cap: Capture, sql: str) -> list[int]:
    """The ids of the statements of `cap` whose text is `sql`, in execution order."""
    texts = {r["query_text_hash"] for r in cap.read("statement_text").to_pylist() if sql_key(r["text"]) == sql_key(sql)}
    rows = sorted((r["start_ns"], r["statement_id"]) for r in cap.read("statement").to_pylist()
                  if r["query_text_hash"] in texts)
    return [sid for _, sid in rows]


def calibrate_disk_in_cgroup(cgroup, directory, file_mb: int = 16) -> dict:
    """calibrate_disk run by a process inside `cgroup`: the disk factors of the throttled platform."""
    import json
    import subprocess
    import sys

    root = str(Path(__file__).parent.parent)
    out = subprocess.run(cgroup.exec_prefix() + [
        sys.executable, "-c", "import json, sys; from mwinv.calibrate import calibrate_disk; "
        f"print(json.dumps(calibrate_disk(sys.argv[1], file_mb={int(file_mb)}, random_reads=100)))", str(directory)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root}, timeout=300, check=True).stdout
    return json.loads(out)


@contextmanager
def veth_namespace(subnet: str):
    """A network namespace joined to this one by a veth pair: yields (netns, host_if, ns_if, host_ip, ns_ip)
    on `subnet` ("10.213.77": .1 here, .2 there); both removed on exit."""
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"mwinv-{tag}", f"mw{tag}h", f"mw{tag}n"
    host_ip, ns_ip = f"{subnet}.1", f"{subnet}.2"

    def ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("netns", "add", ns)
    try:
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{host_ip}/24", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("-n", ns, "addr", "add", f"{ns_ip}/24", "dev", ns_if)
        ip("-n", ns, "link", "set", ns_if, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        yield ns, host_if, ns_if, host_ip, ns_ip
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
