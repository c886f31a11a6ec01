import pytest

from mwinv.errors import MwinvError
from mwinv.workloads import runner, tpch

from conftest import TEST_SCALE


def test_loaded_row_counts(tpch_pg):
    with tpch_pg.connect("tpch") as conn:
        n = conn.execute("select count(*) from lineitem").fetchone()[0]
        orders = conn.execute("select count(*) from orders").fetchone()[0]
    assert orders == int(1_500_000 * TEST_SCALE)
    assert 3.9 * orders < n < 4.1 * orders


@pytest.mark.skipif(TEST_SCALE not in tpch.ANSWER_SCALES, reason="official answers exist at SF 0.01, 0.1, 1")
def test_all_22_queries_equal_official_answers(tpch_pg):
    runs = runner.run_queries(tpch_pg, list(tpch.QUERY_NUMBERS), keep_results=True)
    assert [r.error for r in runs] == [None] * 22
    problems = [p for r in runs for p in tpch.compare_result(r.query, TEST_SCALE, r.result)]
    assert problems == []


def test_compare_result_detects_a_wrong_value(tpch_pg):
    runs = runner.run_queries(tpch_pg, [6], keep_results=True)
    (row,) = runs[0].result
    assert tpch.compare_result(6, 0.01, [row]) == []
    wrong = [(row[0] + 1,)]
    assert tpch.compare_result(6, 0.01, wrong)


def test_concurrent_streams_run_every_query_per_stream(tpch_pg):
    runs = runner.run_queries(tpch_pg, [1, 6, 14], streams=2)
    assert sorted((r.stream, r.query) for r in runs) == [(0, 1), (0, 6), (0, 14), (1, 1), (1, 6), (1, 14)]
    assert all(r.error is None and r.end_ns > r.start_ns for r in runs)


def test_cold_run_restarts_server(tpch_pg):
    with tpch_pg.connect() as conn:
        before = conn.execute("select pg_postmaster_start_time()").fetchone()[0]
    runs = runner.run_queries(tpch_pg, [6], cold=True)
    with tpch_pg.connect() as conn:
        after = conn.execute("select pg_postmaster_start_time()").fetchone()[0]
    assert after > before and runs[0].error is None


@pytest.mark.parametrize("spec,expected", [("1,3,5-7", [1, 3, 5, 6, 7]), ("all", list(range(1, 23)))])
def test_parse_query_list(spec, expected):
    assert tpch.parse_query_list(spec) == expected


@pytest.mark.parametrize("spec", ["23", "0", "x"])
def test_unknown_query_numbers(spec):
    with pytest.raises(MwinvError, match="unknown TPC-H query"):
        tpch.parse_query_list(spec)


@pytest.mark.parametrize("scale", [0, -1, "abc"])
def test_bad_scale(scale):
    with pytest.raises(MwinvError, match="scale factor"):
        tpch.check_scale(scale)
