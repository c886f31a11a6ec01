import os

import pytest

from mwinv.workloads.setup import tpch_server

TEST_SCALE = float(os.environ.get("MWINV_TEST_SCALE", "0.01"))


@pytest.fixture(scope="session")
def tpch_pg():
    """One throw-away server with TPC-H at SF 0.01 and the mwinv extension preloaded, shared by the
    session; always stopped. Small shared_buffers: a scan of lineitem goes through a ring buffer, so
    dropping the page cache is enough to make the next one cold."""
    server = tpch_server(TEST_SCALE, name="pytest", preload=["mwinv"],
                         gucs={"compute_query_id": "on", "shared_buffers": "'16MB'"})
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg():
    """A fresh empty server per test."""
    from mwinv.engines.postgresql.server import PgServer

    with PgServer(name="pytest-fresh") as server:
        yield server


@pytest.fixture
def mariadb_server():
    """A fresh throw-away MariaDB per test (skipped where mariadbd is not installed)."""
    from mwinv.engines.mariadb.server import MariaDBServer, mariadbd
    from mwinv.errors import MwinvError

    try:
        mariadbd()
    except MwinvError as exc:
        pytest.skip(str(exc))
    with MariaDBServer(name="pytest") as server:
        yield server


@pytest.fixture(scope="session")
def hostile():
    """An unprivileged local user (tests/hostile.py); skipped where one cannot be made."""
    from hostile import hostile_user

    return hostile_user()
