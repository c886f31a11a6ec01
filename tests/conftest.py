import os
import shutil
from pathlib import Path

import pytest

from mwinv.kernel_trace.tracefs import TRACEFS_CANDIDATES
from mwinv.workloads.setup import tpch_server

# a correlation session open on a capture keeps its DuckDB file in a directory of its own inside it
# (correlator/load.py connect): copies of a capture leave it out, its files come and go meanwhile
NOT_THE_SESSION = shutil.ignore_patterns(".duckdb-spill-*")


TEST_SCALE = float(os.environ.get("MWINV_TEST_SCALE", "0.01"))

# The tests that need root, and what for: the one place the `root` marker is given (`make test-quick`
# runs the rest: `-m "not root"`). A new test that needs root goes here, by its module (every test in
# it), by module::test, or by a fixture (every test using it, also through another fixture). A need
# is a word of the skip's reason; "tracefs" also needs kernel tracing mounted, "perf" the perf tool.
ROOT_MODULES = {
    "test_capture_lifetime": "tracefs",
    "test_cluster": "namespaces, cgroups",
    "test_correlator": "tracefs",
    "test_degraded": "tracefs",
    "test_duty_cycle": "tracefs",
    "test_experiment": "namespaces, cgroups",
    "test_kernel_settings": "kernel settings, namespaces, cgroups",
    "test_model_whatif": "tracefs, cgroups, namespaces",
    "test_ntier": "PostgreSQL and pgpool-II as postgres",
    "test_report": "tracefs, cgroups",
    "test_serverdir": "servers of root's directory",
}
ROOT_TESTS = {
    "test_cluster::test_link_rate_what_if_checked_by_running": "tracefs",
    "test_extension::test_usdt_probes_fire_with_statement_ids": "tracefs",
    "test_inputs::test_full_disk_during_a_real_capture": "tracefs, mount",
    "test_kernel_record::test_capture_of_tpch_queries": "tracefs",
    "test_kernel_record::test_sigterm_restores_state_and_keeps_the_capture": "tracefs",
    "test_kernel_record::test_kill9_leftovers_are_cleaned_by_the_next_run": "tracefs",
    "test_kernel_record::test_missing_pid_and_events_are_clear_errors": "tracefs",
    "test_kernel_record::test_the_function_tracer_where_allowed_else_why_not": "tracefs",
    "test_lifecycle::test_kill9_capture_is_finished_by_the_next_correlation": "tracefs",
    "test_long_capture::test_a_parsed_trace_is_compressed_or_dropped_and_a_reparse_says_so": "tracefs",
    "test_lifecycle::test_an_interrupted_capture_leaves_its_parse_to_the_next_correlation": "tracefs",
    "test_lifecycle::test_a_second_sigterm_while_a_capture_stops": "tracefs",
    "test_lifecycle::test_two_sigterms_while_an_experiment_captures_its_load": "tracefs, namespaces, cgroups",
    "test_mariadb::test_tpch_answers_equal_the_official_ones": "MariaDB as mysql",
    "test_mariadb::test_capture_tpch_with_kernel_tracing": "tracefs",
    "test_mariadb::test_sigterm_stops_and_removes_server": "MariaDB as mysql",
    "test_mariadb::test_the_thread_pool_worker_of_each_statement": "tracefs",
    "test_mariadb::test_reads_that_io_threads_complete_are_disk_waits": "tracefs",
    "test_mariadb::test_statements_the_ring_overwrote_are_counted": "MariaDB as mysql",
    "test_model_calibrate::test_disk_rate_follows_a_blkio_throttle": "cgroups",
    "test_model_calibrate::test_link_rate_follows_tbf_on_a_veth": "namespaces",
    "test_oracle::test_kernel_side_of_the_traced_host": "tracefs",
    "test_pgserver::test_missing_postgres_user_is_one_line_error": "PostgreSQL as postgres",
    "test_private_files::test_a_capture_and_its_report_are_private_whatever_the_umask": "tracefs",
    "test_private_files::test_group_shares_read_only": "tracefs",
    "test_private_files::test_an_experiment_under_a_quote_is_run_reported_and_private": "namespaces, cgroups",
    "test_private_files::test_a_second_capture_replaces_the_perf_output_of_the_first": "perf",
    "test_tpch::test_cold_run_restarts_server": "dropping the page cache",
    "test_storage::test_sshfs_end_to_end": "namespaces, cgroups, mount, tracefs",
    "test_storage::test_sigterm_of_an_experiment_removes_mounts_and_daemons": "namespaces, cgroups, mount",
    "test_storage::test_kill_9_then_clean_removes_mounts_and_daemons": "namespaces, cgroups, mount",
}
ROOT_FIXTURES = {
    "cluster_capture": "tracefs",         # test_cluster
    "hostile": "another local user",
    "installed": "the extension's installation",   # test_extension
    "mariadb_server": "MariaDB as mysql",
    "tiny_fs": "mount",                   # test_inputs
    "traced": "tracefs",                  # test_statement_window
}


# The tests `make test` runs alone, after the others have run two at a time (pytest-xdist): those that
# time what they check (another test's load on the 2 cores moves it), and those that kill -9 a run and
# check that their clean-up removed what it left (any other test's `mwinv clean`, or the start of any
# kernel recorder, may remove it first). The one place the `serial` marker is given, like `root`'s.
SERIAL_MODULES = {
    "test_model_calibrate": "measures the disk's and the link's rates",
    "test_model_whatif": "what-ifs checked by timed runs",
    "test_report": "its checks time queries against the calibration and the idle CPUs",
    "test_serverdir": "`mwinv clean` of what a killed run left",
}
SERIAL_TESTS = {
    "test_cluster::test_link_rate_what_if_checked_by_running": "a what-if checked by timed runs",
    "test_cluster::test_kill_9_then_clean_removes_everything": "clean-up of a killed run",
    "test_kernel_record::test_kill9_leftovers_are_cleaned_by_the_next_run": "clean-up of a killed run",
    "test_kernel_settings::test_kill_9_then_clean_restores": "clean-up of a killed run",
    "test_ntier::test_a_run_killed_with_9_is_cleaned": "clean-up of a killed run",
    "test_storage::test_kill_9_then_clean_removes_mounts_and_daemons": "clean-up of a killed run",
}


def _module(item: pytest.Item) -> str:
    return item.module.__name__ if getattr(item, "module", None) else ""


def _needs(item: pytest.Item) -> list[str]:
    module = _module(item)
    said = [ROOT_MODULES.get(module), ROOT_TESTS.get(f"{module}::{item.originalname}"),
            *(ROOT_FIXTURES.get(f) for f in item.fixturenames)]
    return list(dict.fromkeys(n.strip() for s in said if s for n in s.split(",")))


def _missing(needs: list[str]) -> str | None:
    """Why tests with these needs cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return f"needs root ({', '.join(needs)})"
    if "tracefs" in needs and not any((r / "instances").is_dir() for r in TRACEFS_CANDIDATES):
        return "needs tracefs (kernel tracing) mounted"
    if "perf" in needs and not shutil.which("perf"):
        return "needs the perf tool"
    return None


@pytest.hookimpl(tryfirst=True)   # before -m selects by the marker
def pytest_collection_modifyitems(config, items):
    modules = {item.module.__name__: item.module for item in items if getattr(item, "module", None)}
    stale = [m for m in (*ROOT_MODULES, *SERIAL_MODULES) if not (Path(__file__).parent / f"{m}.py").exists()]
    stale += [t for t in (*ROOT_TESTS, *SERIAL_TESTS) if t.split("::")[0] in modules
              and not hasattr(modules[t.split("::")[0]], t.split("::")[1])]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py names modules or tests that do not exist: {stale}")
    for item in items:
        module = _module(item)
        if why := SERIAL_MODULES.get(module) or SERIAL_TESTS.get(f"{module}::{item.originalname}"):
            item.add_marker(pytest.mark.serial(why))
        needs = _needs(item)
        if needs:
            item.add_marker(pytest.mark.root(*needs))
            why = _missing(needs)
            if why:
                item.add_marker(pytest.mark.skip(reason=why))


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
