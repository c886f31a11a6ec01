"""Advice rules for MariaDB statements: each a small function of the statement's Evidence, reading the
kernel's shares and performance_schema's own counters of the statement (Evidence.dbms["stats"]: rows
examined, index flags, temporary tables on disk, sort merge passes, full joins, lock time). They
replace the PostgreSQL rules for MariaDB's statements: the settings and remedies are MariaDB's."""

from __future__ import annotations

from mwinv.fmt import duration, pct as _pct
from mwinv.rules import (KERNEL_RULES, MIN_LOCK_SHARE, MIN_RUN_QUEUE_SHARE, MIN_SHARE, Advice, Evidence, Rule)

EXAMINED_PER_ROW = 100      # rows examined per row returned before an index is worth a word
MIN_EXAMINED = 10_000


def _stat(e: Evidence, name: str) -> int:
    return int(e.dbms.get("stats", {}).get(name, 0))


def missing_index(e: Evidence) -> Advice | None:
    examined, no_index, full_join = _stat(e, "rows_examined"), _stat(e, "no_index_used"), _stat(e, "select_full_join")
    if not (no_index or full_join) or examined < MIN_EXAMINED or examined < EXAMINED_PER_ROW * max(e.rows, 1):
        return None
    what = "joins without an index (select_full_join)" if full_join else "scans without an index (no_index_used)"
    return e.advice("mariadb.index", f"{what}: index the columns of its WHERE and join conditions (EXPLAIN shows "
                    "type ALL); a covering index avoids the row lookups too; until then a join without an index "
                    "runs through the join buffer (join_buffer_size, join_cache_level)",
                    f"{examined:,} rows examined for {e.rows:,} returned; no_index_used {no_index}, "
                    f"select_full_join {full_join}", None, "the rows no longer examined")


def tmp_tables_on_disk(e: Evidence) -> Advice | None:
    disk = _stat(e, "created_tmp_disk_tables")
    if not disk:
        return None
    return e.advice("mariadb.tmp_disk", "its temporary tables went to disk: raise tmp_table_size and "
                    "max_heap_table_size together (the smaller wins), and keep TEXT/BLOB columns out of the "
                    "GROUP BY/ORDER BY of such queries (they force disk tables)",
                    f"created_tmp_disk_tables {disk} of {_stat(e, 'created_tmp_tables')} temporary tables", None,
                    "the temporary tables' disk I/O")


def sort_merges(e: Evidence) -> Advice | None:
    passes = _stat(e, "sort_merge_passes")
    if not passes:
        return None
    return e.advice("mariadb.sort", "its sorts merged on disk: raise sort_buffer_size for this session (SET "
                    "SESSION), or sort on an index", f"sort_merge_passes {passes}", None, "the merge passes")


def buffer_pool(e: Evidence) -> Advice | None:
    if e.shares["disk_random"] < MIN_SHARE:
        return None
    return e.advice("mariadb.buffer_pool", "InnoDB read its pages from disk one at a time: a larger "
                    "innodb_buffer_pool_size keeps them (compare Innodb_buffer_pool_reads with "
                    "Innodb_buffer_pool_read_requests), or an index that visits fewer pages",
                    f"disk_random {_pct(e.shares['disk_random'])} of {e.in_db()}, {e.random_reqs:,} requests",
                    e.gain("rand_access", 0.1), "model what-if: random access 10x faster (all cached)")


def cpu(e: Evidence) -> Advice | None:
    if e.shares["cpu"] < 0.5:
        return None
    examined = _stat(e, "rows_examined")
    return e.advice("mariadb.cpu", "CPU-bound on one thread (MariaDB runs a query on one thread): cut the rows "
                    "it examines (an index, a narrower condition) or split it into parts run in parallel "
                    "by the application", f"cpu {_pct(e.shares['cpu'])} of {e.in_db()}; "
                    f"{examined:,} rows examined", None, "depends on the rows no longer examined")


def lock(e: Evidence) -> Advice | None:
    lock_ns = _stat(e, "lock_time_ns")
    if e.shares["lock"] < MIN_LOCK_SHARE and lock_ns < MIN_LOCK_SHARE * e.db_ns:
        return None
    return e.advice("mariadb.lock", "waiting for locks (InnoDB row locks, metadata locks: futex sleeps in the "
                    "kernel): find the holder in information_schema.INNODB_TRX / metadata_lock_info, shorten "
                    "its transaction", f"lock_wait {_pct(e.shares['lock'])} of {e.in_db()}; lock time {duration(lock_ns)}",
                    e.ns.get("lock_wait", 0), "all of the lock wait")


def run_queue(e: Evidence) -> Advice | None:
    if e.shares["run_queue"] < MIN_RUN_QUEUE_SHARE:
        return None
    waited = e.ns.get("run_queue", 0)
    return e.advice("mariadb.run_queue", f"its thread waited {duration(waited)} runnable but not running: more busy "
                    f"threads than the {e.cpus} CPUs; cap them (thread_handling=pool-of-threads with "
                    "thread_pool_size = CPUs) or add CPUs", f"run_queue {_pct(e.shares['run_queue'])} of {e.in_db()}", waited,
                    "all of the run-queue wait")


def unexplained(e: Evidence) -> Advice | None:
    share = e.ns.get("not_allocated", 0) / e.db_ns if e.db_ns else 0
    if share < 0.5:
        return None
    return e.advice("mariadb.unexplained", f"{_pct(share)} of its time in the database has no known cause: read from the slow query "
                    "log (durations and lock time only) or outside a kernel capture; capture the server's threads "
                    "(MariaDBCapture, docs/mariadb.md) to split it into CPU, disk, locks and run queue",
                    f"not_allocated {duration(e.ns.get('not_allocated', 0))} of {e.in_db()}", None,
                    "unknown until the kernel side is captured")


MARIADB_RULES: list[Rule] = [missing_index, tmp_tables_on_disk, sort_merges, buffer_pool, cpu, lock, run_queue,
                             *KERNEL_RULES, unexplained]
