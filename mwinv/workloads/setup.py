"""A throw-away server holding a loaded TPC-H database: the starting point of demos, tests and
benchmarks."""

from __future__ import annotations

from mwinv.cgroup import Cgroup
from mwinv.engines.postgresql.server import PgServer
from mwinv.workloads import tpch


def tpch_server(scale: float, name: str = "tpch", memory_mb: int | None = None,
                preload: list[str] | None = None, gucs: dict[str, str] | None = None,
                port: int | None = None, progress=None) -> PgServer:
    """Start a server, create database `tpch` and load it at `scale`; with memory_mb, cap its memory
    once loaded (the cap is for the queries: building lineitem's indexes at SF 1 under 256 MB had the
    OOM killer end the server). The caller stops it (it is also stopped at exit and on SIGTERM)."""
    scale = tpch.check_scale(scale)
    data_dir = tpch.generate(scale, progress=progress)
    cgroup = Cgroup(name, memory_bytes=-1) if memory_mb else None   # the group now, its cap after the load
    server = PgServer(name=name, port=port, shared_preload_libraries=list(preload or []),
                      gucs={"shared_buffers": "'128MB'", "max_parallel_workers_per_gather": "2",
                            "jit": "off", **(gucs or {})},
                      cgroup=cgroup)
    server.start()
    try:
        server.psql("CREATE DATABASE tpch")
        with server.connect("tpch") as conn:
            tpch.load(conn, data_dir, progress=progress)
        if cgroup is not None:
            if progress:
                progress(f"memory cap {memory_mb} MB")
            cgroup.limit_memory(memory_mb * 2**20)
    except BaseException:
        server.stop()
        raise
    return server
