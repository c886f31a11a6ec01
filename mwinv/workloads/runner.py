"""Run a list of TPC-H queries on a server: one sequence or N concurrent streams, cold or warm,
with a progress bar and per-query timings."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from mwinv.cgroup import drop_page_cache
from mwinv.workloads import tpch


@dataclass
class QueryRun:
    query: int
    stream: int
    start_ns: int  # CLOCK_MONOTONIC, the clock the kernel trace and the extension use
    end_ns: int
    rows: int
    error: str | None = None
    result: list[tuple] | None = None
    backend_pid: int | None = None   # the server process that ran it (to find its statement in a capture)

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _stream_order(numbers: list[int], stream: int) -> list[int]:
    # Streams start at different positions so that they do not run the same query in lock-step.
    k = stream % len(numbers) if numbers else 0
    return numbers[k:] + numbers[:k]


def run_queries(server, numbers: list[int], dbname: str = "tpch", streams: int = 1, cold: bool = False,
                keep_results: bool = False, statement_timeout_s: float | None = None,
                on_done=None) -> list[QueryRun]:
    """Run `numbers` once per stream. cold: drop the page cache and restart the server first."""
    numbers = tpch.check_queries(numbers)
    if cold:
        drop_page_cache()
        server.restart()
        drop_page_cache()
    runs: list[QueryRun] = []
    lock = threading.Lock()

    def one_stream(stream: int) -> None:
        with server.connect(dbname) as conn:
            if statement_timeout_s:
                conn.execute(f"SET statement_timeout = {int(statement_timeout_s * 1000)}")
            conn.execute("SET application_name = 'mwinv-tpch'")
            backend = conn.info.backend_pid
            for q in _stream_order(numbers, stream):
                sql = tpch.query_sql(q)
                t0 = time.monotonic_ns()
                err, rows = None, []
                try:
                    with conn.cursor() as cur:
                        cur.execute(sql)
                        rows = cur.fetchall()
                except Exception as exc:  # a failing query is a result to report, not a crash
                    err = str(exc).strip().splitlines()[0]
                t1 = time.monotonic_ns()
                run = QueryRun(q, stream, t0, t1, len(rows), err, rows if keep_results else None, backend)
                with lock:
                    runs.append(run)
                if on_done:
                    on_done(run)

    errors: list[BaseException] = []

    def guarded(s: int) -> None:
        try:
            one_stream(s)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(s,), daemon=True) for s in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)  # short joins keep Ctrl-C responsive
    if errors:
        raise errors[0]
    return sorted(runs, key=lambda r: (r.stream, r.start_ns))


def run_with_progress(server, numbers: list[int], console=None, **kw) -> list[QueryRun]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    total = len(numbers) * kw.get("streams", 1)
    with Progress(TextColumn("[bold]TPC-H"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=False) as progress:
        task = progress.add_task("", total=total)

        def done(run: QueryRun) -> None:
            progress.update(task, advance=1, description=f"Q{run.query} {run.seconds:.2f}s")

        return run_queries(server, numbers, on_done=done, **kw)


def timing_table(runs: list[QueryRun], title: str = "TPC-H query timings"):
    from rich.table import Table

    table = Table(title=title)
    for col in ("query", "stream", "seconds", "rows", "status"):
        table.add_column(col, justify="right" if col in ("seconds", "rows") else "left")
    for r in runs:
        table.add_row(f"Q{r.query}", str(r.stream), f"{r.seconds:.3f}", str(r.rows), r.error or "ok")
    total = sum(r.seconds for r in runs)
    table.add_row("total", "", f"{total:.3f}", "", "", style="bold")
    return table
