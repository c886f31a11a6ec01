"""Advice rules for statements traced by Oracle's extended SQL trace: each a small function of the
statement's Evidence, reading the trace's own account (Evidence.dbms: wait events with their objects,
calls, hard parses, literal variants, commits). They replace the PostgreSQL rules for such statements:
the remedies are Oracle's."""

from __future__ import annotations

from mwinv.fmt import duration, pct as _pct
from mwinv.rules import MIN_LOCK_SHARE, MIN_SHARE, Advice, Evidence, Rule

MIN_EVENT_SHARE = 0.10     # a wait event worth naming holds a tenth of the time in the database
ONE_OBJECT = 0.5           # reads "on one object" when it took half of them


def _share(e: Evidence, *components: str) -> float:
    return sum(e.ns.get(c, 0) for c in components) / e.db_ns if e.db_ns else 0.0


def _events(e: Evidence, component: str) -> list[dict]:
    return [w for w in e.dbms.get("waits", []) if w["component"] == component]


def _top_object(waits: list[dict]) -> tuple[int | None, float, str | None]:
    """The object most of these waits were on, its share of their time, and the plan operation reading it."""
    by_obj: dict[int, float] = {}
    ops: dict[int, str] = {}
    for w in waits:
        for o in w["objects"]:
            by_obj[o["obj"]] = by_obj.get(o["obj"], 0) + o["ns"]
            if o.get("operation"):
                ops[o["obj"]] = o["operation"]
    total = sum(by_obj.values())
    if not total:
        return None, 0.0, None
    obj = max(by_obj, key=by_obj.get)
    return obj, by_obj[obj] / total, ops.get(obj)


def _event_ev(e: Evidence, waits: list[dict]) -> str:
    return "; ".join(f"{w['event']} {duration(w['ns'])} in {w['count']:,} waits ({_pct(w['ns'] / e.db_ns)})"
                     for w in waits[:3]) + f"; shares of {e.in_db()}"


def single_block_reads(e: Evidence) -> Advice | None:
    waits = _events(e, "disk_random")
    if _share(e, "disk_random") < MIN_SHARE or not waits:
        return None
    obj, share, op = _top_object(waits)
    where = (f"{_pct(share)} of them on obj# {obj}" + (f" ({op})" if op else "")) if obj else "objects unknown"
    focus = ("that plan operation fetches rows one block at a time: check the index's clustering factor, "
             "a covering index (no table access by rowid), or keep the segment cached (KEEP pool)"
             if obj and share >= ONE_OBJECT else
             "spread over several objects: a larger buffer cache (db_cache_size) or fewer rows visited per "
             "execution (a more selective index, a better join order)")
    return e.advice("oracle.single_block_reads", f"single-block reads dominate, {where}: {focus}",
                    _event_ev(e, waits), None, "the disk time on that object at most")


def full_scans(e: Evidence) -> Advice | None:
    waits = [w for w in _events(e, "disk_seq") if not w["event"].startswith("log file")]
    if not waits or sum(w["ns"] for w in waits) < MIN_SHARE * e.db_ns:
        return None
    obj, share, op = _top_object(waits)
    on = f" on obj# {obj}" + (f" ({op})" if op else "") if obj and share >= ONE_OBJECT else ""
    return e.advice("oracle.full_scans", f"multiblock reads (full scans){on}: let partition pruning or an "
                    "index cut what is read, or scan in parallel; direct path reads bypass the buffer cache, "
                    "so caching does not help them", _event_ev(e, waits), None, "the scan's disk time at most")


def commit_rate(e: Evidence) -> Advice | None:
    waits = [w for w in e.dbms.get("waits", []) if w["event"] == "log file sync"]
    ns = sum(w["ns"] for w in waits)
    if not waits or ns < MIN_EVENT_SHARE * e.db_ns:
        return None
    commits = e.dbms.get("commits", 0)
    return e.advice("oracle.commit_rate", "waiting for the redo writer at commit: commit less often (batch rows "
                    "per transaction), and put the online redo logs on the fastest, least shared disk (check "
                    "'log file parallel write' of LGWR)", f"{_event_ev(e, waits)}; {commits:,} commits", ns,
                    "all of the log file sync time, if commits went away")


def parse_heavy(e: Evidence) -> Advice | None:
    d = e.dbms
    parses, execs, hard, variants = d.get("parses", 0), d.get("execs", 0), d.get("hard_parses", 0), d.get("variants", 1)
    parse_ns = d.get("parse_ns", 0)
    if parses == 0 or (hard < 2 and variants < 2) or parse_ns < MIN_EVENT_SHARE * e.db_ns:
        return None
    return e.advice("oracle.parse", "parsing costs: use bind variables for the literals (or cursor_sharing=FORCE "
                    "as a stopgap), keep cursors open and parse once per session (session_cached_cursors, "
                    "statement caching in the driver)",
                    f"{parses:,} parse calls for {execs:,} executions, {hard:,} hard parses (misses in library "
                    f"cache), {variants:,} texts differing only in literals; parse time {duration(parse_ns)}",
                    parse_ns, "the parse calls' elapsed time")


def lock_events(e: Evidence) -> Advice | None:
    waits = _events(e, "lock_wait")
    if _share(e, "lock_wait") < MIN_LOCK_SHARE or not waits:
        return None
    top = waits[0]["event"]
    if top.startswith("enq: TX - row lock"):
        what = "row locks held by another transaction: shorten the holders' transactions, commit sooner, or " \
               "touch rows in one order (V$SESSION.BLOCKING_SESSION names the holder)"
    elif top.startswith("enq: TM"):
        what = "table locks: index the foreign key columns (unindexed foreign keys lock the child table)"
    elif top.startswith(("library cache", "cursor:")):
        what = "library cache contention: hard parses or invalidations of a shared cursor — bind variables, " \
               "no DDL or statistics gathering on hot objects during the load"
    elif top.startswith(("latch", "buffer busy")):
        what = "contention on hot blocks or latches: spread the hot rows (hash partitioning, reverse-key index)"
    else:
        what = "waiting for other sessions: find the holder in V$SESSION / V$LOCK while it happens"
    return e.advice("oracle.lock", f"{top}: {what}", _event_ev(e, waits), None, "the lock wait time at most")


def cluster_waits(e: Evidence) -> Advice | None:
    waits = _events(e, "remote_wait")
    if _share(e, "remote_wait") < MIN_EVENT_SHARE or not waits:
        return None
    return e.advice("oracle.rac", "global cache transfers between instances: route this work to one instance "
                    "(service affinity) or partition the hot data by instance", _event_ev(e, waits), None,
                    "the interconnect wait time at most")


def fetch_size(e: Evidence) -> Advice | None:
    d = e.dbms
    trips, saved = d.get("fetches", 0), d.get("fetch_saved_ns", 0)
    if trips <= 2 * max(e.executions, 1) or saved < MIN_EVENT_SHARE * (e.db_ns + e.ns.get("client_wait", 0)):
        return None
    per_byte = d.get("fetch_ns_per_byte")
    grows = (f" + {per_byte:.0f} ns per byte carried ({d.get('fetch_bytes', 0):,} bytes beyond the first packets, "
             "whose cost stays)" if per_byte else "")
    return e.advice("oracle.fetch_size", f"raise the client's fetch array size (to {d.get('fetch_size_to')}): "
                    "each fetch is a round trip", f"{trips:,} fetch calls for {d.get('rows', 0):,} rows; client "
                    f"round trips {duration(e.ns.get('client_wait', 0))}; a trip costs "
                    f"{duration(d.get('fetch_base_ns', 0))}{grows}", saved,
                    "round trips saved x a trip's base cost (least squares over the node's round trips in SQL*Net "
                    "waits against the bytes they carried): an upper bound (the base also holds the client's "
                    "time between calls; `mwinv oracle tkprof --rtt` gives the lower bound at the network round "
                    "trip)")


def sleeps(e: Evidence) -> Advice | None:
    waits = [w for w in e.dbms.get("waits", []) if w["event"] in ("PL/SQL lock timer", "pipe get", "jobq slave wait")]
    ns = sum(w["ns"] for w in waits)
    if ns < MIN_SHARE * e.db_ns:
        return None
    return e.advice("oracle.sleep", "the statement's own code sleeps (DBMS_LOCK.SLEEP / DBMS_SESSION.SLEEP, pipes): "
                    "that is the application's choice, not the database's; look at why it waits",
                    _event_ev(e, waits), ns, "all of the sleep")


def cpu(e: Evidence) -> Advice | None:
    if _share(e, "cpu_user", "cpu_sys") < 0.5:
        return None
    return e.advice("oracle.cpu", "CPU in the database: the logical reads (cr=) of its row source operations say "
                    "which step does the work; a more selective access path or fewer executions cut it",
                    f"cpu {_pct(_share(e, 'cpu_user', 'cpu_sys'))} of {e.in_db()}", None,
                    "depends on the plan change")


def unaccounted(e: Evidence) -> Advice | None:
    share = _share(e, "not_allocated")
    if abs(share) < MIN_SHARE:
        return None
    return e.advice("oracle.unaccounted", f"{_pct(share)} of the time in the database is unaccounted-for by the "
                    "trace: the process was runnable but not on a CPU (run queue), paged, or outside database calls "
                    "without a wait event; negative means c= and the waits overran e= (CPU time quantisation). A kernel capture "
                    "of the host (mwinv-trace) splits it into run queue, off-CPU states and block I/O",
                    f"unaccounted-for {duration(e.ns.get('not_allocated', 0))} of {e.in_db()}", None,
                    "unknown until the kernel side is traced")


ORACLE_RULES: list[Rule] = [single_block_reads, full_scans, commit_rate, parse_heavy, lock_events, cluster_waits,
                            fetch_size, sleeps, cpu, unaccounted]
