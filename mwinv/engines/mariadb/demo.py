"""MariaDB's demo (`mwinv demo --dbms mariadb`): a throw-away server, TPC-H in its dialect, the 22
queries under a capture of its threads and its performance_schema statements."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from mwinv.calibrate import calibrate, store
from mwinv.cli.common import progress_logger
from mwinv.errors import MwinvError
from mwinv.workloads import tpch


def demo(scale: float, capture_dir: Path, console: Console, nodes: int = 0) -> None:
    from mwinv.engines.mariadb import tpch as mtpch
    from mwinv.engines.mariadb.capture import MariaDBCapture
    from mwinv.engines.mariadb.server import MariaDBServer

    if nodes:
        raise MwinvError("--nodes is a PostgreSQL cluster (postgres_fdw); MariaDB's demo is one server")
    progress = progress_logger(console)
    with MariaDBServer(name="demo") as server:
        progress(f"MariaDB on port {server.port}")
        with server.connect() as conn:
            mtpch.load(conn, tpch.generate(scale, progress=progress), progress=progress)
        with server.connect("tpch") as conn, conn.cursor() as cur:
            with MariaDBCapture(server, capture_dir, node="demo", stacks=True, trace="auto",
                                progress=progress) as cap:
                for q in tpch.QUERY_NUMBERS:
                    t0 = time.monotonic()
                    cur.execute(mtpch.query_sql(q))
                    rows = cur.fetchall()
                    progress(f"Q{q}: {len(rows)} rows in {time.monotonic() - t0:.3f} s")
        for what, why in cap.summary.get("skipped", {}).items():
            console.print(f"[yellow]skipped[/] {what}: {why}")
        store(capture_dir, calibrate(server.data_dir, progress=lambda s: progress(f"calibrate {s}")))
