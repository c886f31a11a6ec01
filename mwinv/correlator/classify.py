"""Classification per statement (`statement_class`): the resource that limits it, with the evidence.

Classes: cpu, disk_seq, disk_random, network, lock, run_queue, dbms-internal, unknown.
- Shares are of the statement's time in the database (its wall time less client_wait), from
  `statement_attribution` (cpu = cpu_user + cpu_sys).
- The explained share is what a resource or a known wait accounts for (all components except
  other_wait and not_allocated). Below `internal_threshold` the statement is dbms-internal: no
  machine resource or lock explains it ([Taufer]'s query 8, under 20 % explained).
- Otherwise the limit is the largest of cpu, disk_seq, disk_random, network, lock, run_queue;
  the confidence is its share of the explained time.
- unknown: no attribution rows for the statement."""

from __future__ import annotations

import pyarrow as pa

from mwinv.capture.tables import SCHEMAS
from mwinv.correlator.load import literal

LIMIT_CLASSES = ("cpu", "disk_seq", "disk_random", "network", "lock", "run_queue", "remote")
DEFAULT_INTERNAL_THRESHOLD = 0.20
# the components summed into each class's share; "unexplained" is the rest of the wall time's split
CLASS_COMPONENTS = {"cpu": ("cpu_user", "cpu_sys"), "disk_seq": ("disk_seq",), "disk_random": ("disk_random",),
                    "network": ("network",), "lock": ("lock_wait",), "run_queue": ("run_queue",),
                    "remote": ("remote_wait",),
                    "unexplained": ("other_wait", "not_allocated")}


def class_shares(con, only: list[int] | None = None,
                 inputs: str = "model") -> dict[int, tuple[dict[str, float], str, float]]:
    """For the root statements of a connection holding a model's inputs (`inputs`: model.inputs_from's; those
    in `only`, if given): (share per class and "unexplained", limit, explained share), from its class_shares
    (sql/class_shares.sql)."""
    cols = [f"s_{k}" for k in CLASS_COMPONENTS]
    wanted = f"statement_id IN ({', '.join(str(int(i)) for i in only) or 'NULL'})" if only is not None else "true"
    _threshold(con, DEFAULT_INTERNAL_THRESHOLD)
    rows = con.execute(f"SELECT statement_id, {', '.join(cols)}, lim, explained FROM class_shares({literal(inputs)}) "
                       f"WHERE {wanted}").fetchall()
    return {sid: (dict(zip(CLASS_COMPONENTS, vals)), lim, explained) for sid, *vals, lim, explained in rows}


def _threshold(con, internal_threshold: float) -> None:
    con.execute(f"SET VARIABLE internal_threshold = {float(internal_threshold)}")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


# Fewer samples than this, for one statement and a sampled source, cannot rank kernel functions: one
# sample alone would hold 5 % or more of the statement's kernel time. Sleeping stretches (sched-stack)
# are not samples: each is measured whole, so ten sleeps of 130 ms on a slow disk (a cold scan capped
# at 20 MB/s) are 1.3 s measured, and rank however few they are.
MIN_RANKED_SAMPLES = 20
SAMPLED_SOURCES = frozenset({"perf-cpu-clock"})


def _thin(source: str, n: int) -> bool:
    return source in SAMPLED_SOURCES and n < MIN_RANKED_SAMPLES


def kernel_samples(kernel_functions: pa.Table | None) -> dict[int, dict[str, int]]:
    """Per statement, the number of samples (perf) or sleeping stretches (stacks) of each source."""
    out: dict[int, dict[str, int]] = {}
    if kernel_functions is not None:
        for r in kernel_functions.select(["statement_id", "source", "samples"]).to_pylist():
            by_source = out.setdefault(r["statement_id"], {})
            by_source[r["source"]] = by_source.get(r["source"], 0) + (r["samples"] or 0)
    return out


def ranked_kernel_functions(kernel_functions: pa.Table | None) -> dict[int, list[dict]]:
    """Per statement, the kernel-function rows of its measured sources and of its sampled ones with
    samples enough to rank them."""
    counts = kernel_samples(kernel_functions)
    out: dict[int, list[dict]] = {}
    if kernel_functions is not None:
        for r in kernel_functions.to_pylist():
            if not _thin(r["source"], counts[r["statement_id"]][r["source"]]):
                out.setdefault(r["statement_id"], []).append(r)
    return out


def thin_sources(counts: dict[str, int]) -> str:
    """'perf-cpu-clock 5': the sampled sources with too few samples to rank functions, or ''."""
    return ", ".join(f"{src} {n}" for src, n in sorted(counts.items()) if _thin(src, n))


def kernel_evidence(ranked: list[dict], counts: dict[str, int], top: int = 3) -> str | None:
    """The top kernel functions by share, with their source; or why none can be named."""
    names: list[str] = []
    for r in sorted(ranked, key=lambda r: -(r["share"] or 0)):
        if len(names) < top and not any(n.startswith(r["function"] + " ") for n in names):
            names.append(f"{r['function']} {_pct(r['share'] or 0)} of {r['source']}")
    if names:
        return "kernel: " + ", ".join(names)
    if counts:
        return f"kernel: too few samples to rank functions ({thin_sources(counts)})"
    return None


def classify(con, kernel_functions: pa.Table | None = None,
             internal_threshold: float = DEFAULT_INTERNAL_THRESHOLD) -> pa.Table:
    """The `statement_class` table (con: holding the model's inputs: a capture's session, or
    model.model_connection)."""
    _threshold(con, internal_threshold)
    classes = con.execute("SELECT * FROM class_evidence('model')").to_arrow_table()
    if kernel_functions is None or not kernel_functions.num_rows:
        return classes.cast(SCHEMAS["statement_class"])
    # the kernel functions' evidence, for the few statements that have some
    kernel_rows, kernel_counts = ranked_kernel_functions(kernel_functions), kernel_samples(kernel_functions)
    evidence = classes.column("evidence").to_pylist()
    for i, (sid, limit) in enumerate(zip(classes.column("statement_id").to_pylist(), classes.column("limit").to_pylist())):
        if sid in kernel_counts and limit != "unknown":
            kernel = kernel_evidence(kernel_rows.get(sid, []), kernel_counts[sid])
            if kernel:
                evidence[i] += "; " + kernel
    classes = classes.set_column(classes.schema.get_field_index("evidence"), "evidence", pa.array(evidence, pa.string()))
    return classes.cast(SCHEMAS["statement_class"])
