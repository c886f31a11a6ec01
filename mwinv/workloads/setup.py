"""A throw-away server holding a loaded TPC-H database: the starting point of demos, tests and
benchmarks."""

from __future__ import annotations

from mwinv.cgroup import Cgroup
from mwinv.pgserver import PgServer
from mwinv.workloads import tpch


def tpch_server(scale: float, name: str = "tpch", memory_mb: int | None = None,
                preload: list[str] | None = None, gucs: dict[str, str] | None = None,
                port: int | None = None, progress=None) -> PgServer:
    """Start a server (optionally memory-capped), create database `tpch` and load it at `scale`.
    The caller stops it (it is also stopped at exit and on SIGTERM)."""
    scale = tpch.check_scale(scale)
    data_dir = tpch.generate(scale, progress=progress)
    cgroup = Cgroup(name, memory_bytes=memory_mb * 2**20) if memory_mb else None
    server = PgServer(name=name, port=port, shared_preload_libraries=list(preload or []),
                      gucs={"shared_buffers": "'128MB'", "max_parallel_workers_per_gather": "2",
                            "jit": "off", **(gucs or {})},
                      cgroup=cgroup)
    server.start()
    try:
        server.psql("CREATE DATABASE tpch")
        with server.connect("tpch") as conn:
            tpch.load(conn, data_dir, progress=progress)
    except BaseException:
        server.stop()
        raise
    return server
