"""Record tests/golden/pg_small_capture: a small real capture that the correlator and the report are
tested on anywhere (no root, no tracefs, no server): a throw-away PostgreSQL 15 with the mwinv
extension, TPC-H SF 0.01, under NodeCapture (default kernel events, samples every 100 ms, the
extension's statements), calibrated, not correlated. The raw trace (kernel/) is left out: the
tables hold what it said.

Statements: TPC-H Q6 (CPU), pg_sleep(0.2) (an idle wait), a SELECT waiting ~300 ms for a table lock
another session holds, 50 prepared point selects (extended protocol).

Usage (root, tracefs):
    python scripts/record_golden_capture.py tests/golden/pg_small_capture
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path

from mwinv.capture.tables import Capture
from mwinv.calibrate import calibrate_cpu, calibrate_disk, calibrate_link
from mwinv.node_capture import NodeCapture
from mwinv.options import CaptureOptions
from mwinv.workloads import tpch
from mwinv.workloads.setup import tpch_server

LOCK_HOLD_S = 0.3


def workload(server) -> None:
    with server.connect("tpch") as conn:
        conn.execute(tpch.query_sql(6)).fetchall()
        conn.execute("SELECT pg_sleep(0.2)").fetchall()
    holder = server.connect("tpch", autocommit=False)
    holder.execute("LOCK TABLE nation IN ACCESS EXCLUSIVE MODE")
    release = threading.Timer(LOCK_HOLD_S, holder.commit)
    release.start()
    with server.connect("tpch") as conn:
        conn.execute("SELECT count(*) FROM nation").fetchall()
    release.join()
    holder.close()
    with server.connect("tpch") as conn:
        for key in range(1, 51):
            conn.execute("SELECT o_totalprice FROM orders WHERE o_orderkey = %s", [key], prepare=True).fetchall()


def main(out: str) -> None:
    out_dir = Path(out)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    server = tpch_server(0.01, name="golden", preload=["mwinv"])
    try:
        with server.connect("tpch") as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS mwinv")
            conn.execute("SELECT mwinv_reset()")
        with NodeCapture(out_dir, CaptureOptions(node="pg", sample_interval_s=0.1),
                         postmaster_pid=server.postmaster_pid(), conninfo=server.conninfo("tpch")):
            time.sleep(0.3)
            workload(server)
            time.sleep(0.3)
        calibration = {"disk": calibrate_disk(server.data_dir, file_mb=16, random_reads=200),
                       "cpu": calibrate_cpu(),
                       "links": {"127.0.0.1": calibrate_link("127.0.0.1", bulk_mb=8, pings=50)}}
        Capture(out_dir).update_manifest(calibration=calibration)
    finally:
        server.stop()
    shutil.rmtree(out_dir / "kernel")


if __name__ == "__main__":
    main(sys.argv[1])
