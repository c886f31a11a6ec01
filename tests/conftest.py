import os

import pytest

from mwinv.workloads.setup import tpch_server

TEST_SCALE = float(os.environ.get("MWINV_TEST_SCALE", "0.01"))


@pytest.fixture(scope="session")
def tpch_pg():
    """One throw-away server with TPC-H at SF 0.01, shared by the session; always stopped."""
    server = tpch_server(TEST_SCALE, name="pytest")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg():
    """A fresh empty server per test."""
    from mwinv.pgserver import PgServer

    with PgServer(name="pytest-fresh") as server:
        yield server
