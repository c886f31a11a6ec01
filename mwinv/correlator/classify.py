"""Classification per statement (`statement_class`): the resource that limits it, with the evidence.

Classes: cpu, disk_seq, disk_random, network, lock, run_queue, dbms-internal, unknown.
- Shares are of the statement's wall time, from `statement_attribution` (cpu = cpu_user + cpu_sys).
- The explained share is what a resource or a known wait accounts for (all components except
  other_wait and not_allocated). Below `internal_threshold` the statement is dbms-internal: no
  machine resource or lock explains it (seed 000's query 8, under 20 % explained).
- Otherwise the limit is the largest of cpu, disk_seq, disk_random, network, lock, run_queue;
  the confidence is its share of the explained time.
- unknown: no attribution rows for the statement."""

from __future__ import annotations

import pyarrow as pa

from mwinv.capture.tables import SCHEMAS
from mwinv.correlator.model import iter_inputs, model_connection

CLASS_OF_COMPONENT = {"cpu_user": "cpu", "cpu_sys": "cpu", "disk_seq": "disk_seq", "disk_random": "disk_random",
                      "network": "network", "lock_wait": "lock", "run_queue": "run_queue"}
LIMIT_CLASSES = ("cpu", "disk_seq", "disk_random", "network", "lock", "run_queue")
DEFAULT_INTERNAL_THRESHOLD = 0.20


def class_shares(attributed: dict[str, int], wall_ns: int) -> dict[str, float]:
    """Share of wall time per limit class, plus 'unexplained' (other_wait + not_allocated)."""
    shares = {c: 0.0 for c in LIMIT_CLASSES}
    if wall_ns <= 0:
        return {**shares, "unexplained": 0.0}
    for comp, ns in attributed.items():
        if comp in CLASS_OF_COMPONENT:
            shares[CLASS_OF_COMPONENT[comp]] += ns / wall_ns
    shares["unexplained"] = (attributed.get("other_wait", 0) + attributed.get("not_allocated", 0)) / wall_ns
    return shares


def decide(shares: dict[str, float], internal_threshold: float = DEFAULT_INTERNAL_THRESHOLD) -> tuple[str, float, float]:
    """(limit, explained share, confidence) from class shares."""
    explained = sum(shares[c] for c in LIMIT_CLASSES)
    if explained < internal_threshold:
        return "dbms-internal", explained, 1.0 - explained
    limit = max(LIMIT_CLASSES, key=lambda c: shares[c])
    return limit, explained, shares[limit] / explained


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


# Fewer samples than this, for one statement and source, cannot rank kernel functions: one sample
# alone would hold 5 % or more of the statement's kernel time.
MIN_RANKED_SAMPLES = 20


def kernel_samples(kernel_functions: pa.Table | None) -> dict[int, dict[str, int]]:
    """Per statement, the number of samples (perf) or sleeping stretches (stacks) of each source."""
    out: dict[int, dict[str, int]] = {}
    if kernel_functions is not None:
        for r in kernel_functions.select(["statement_id", "source", "samples"]).to_pylist():
            by_source = out.setdefault(r["statement_id"], {})
            by_source[r["source"]] = by_source.get(r["source"], 0) + (r["samples"] or 0)
    return out


def ranked_kernel_functions(kernel_functions: pa.Table | None) -> dict[int, list[dict]]:
    """Per statement, the kernel-function rows of the sources with enough samples to rank them."""
    counts = kernel_samples(kernel_functions)
    out: dict[int, list[dict]] = {}
    if kernel_functions is not None:
        for r in kernel_functions.to_pylist():
            if counts[r["statement_id"]][r["source"]] >= MIN_RANKED_SAMPLES:
                out.setdefault(r["statement_id"], []).append(r)
    return out


def thin_sources(counts: dict[str, int]) -> str:
    """'perf-cpu-clock 5, sched-stack 4': the sources with too few samples to rank functions, or ''."""
    return ", ".join(f"{src} {n}" for src, n in sorted(counts.items()) if n < MIN_RANKED_SAMPLES)


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


def classify(statements: pa.Table, attribution: pa.Table, kernel_functions: pa.Table | None = None,
             statement_io: pa.Table | None = None,
             internal_threshold: float = DEFAULT_INTERNAL_THRESHOLD) -> pa.Table:
    """The `statement_class` table."""
    kernel_rows, kernel_counts = ranked_kernel_functions(kernel_functions), kernel_samples(kernel_functions)
    node_of = dict(zip(statements.column("statement_id").to_pylist(), statements.column("node").to_pylist()))
    columns: dict[str, list] = {f.name: [] for f in SCHEMAS["statement_class"]}

    def add(st: dict, limit: str, allocated: float, confidence: float, evidence: str) -> None:
        for name, value in (("node", node_of.get(st["statement_id"])), ("statement_id", st["statement_id"]),
                            ("query_id", st["query_id"]), ("limit", limit), ("allocated_share", allocated),
                            ("confidence", confidence), ("evidence", evidence)):
            columns[name].append(value)

    con = model_connection(statements, attribution, statement_io)
    for st in iter_inputs(con):  # one at a time: hundreds of thousands of statements are common
        sid, wall, a = st["statement_id"], st["wall_ns"], st["attributed"]
        if not a:
            add(st, "unknown", 0.0, 0.0, "no attribution rows for this statement (kernel side missing?)")
            continue
        shares = class_shares(a, wall)
        limit, explained, confidence = decide(shares, internal_threshold)
        ranked = sorted(LIMIT_CLASSES, key=lambda c: -shares[c])
        parts = [f"{c} {_pct(shares[c])}" for c in ranked if shares[c] >= 0.005]
        ev = [f"wall {wall / 1e6:.1f} ms; " + (", ".join(parts) or "no resource time"),
              f"explained {_pct(explained)} (threshold {_pct(internal_threshold)}), "
              f"unexplained {_pct(shares['unexplained'])} (other_wait {a.get('other_wait', 0) / 1e6:.1f} ms, "
              f"not_allocated {a.get('not_allocated', 0) / 1e6:.1f} ms)"]
        if limit == "cpu":
            ev.append(f"user {a.get('cpu_user', 0) / 1e6:.1f} ms, sys {a.get('cpu_sys', 0) / 1e6:.1f} ms")
        if st["from_workers_ns"]:
            ev.append(f"parallel workers {st['from_workers_ns'] / 1e6:.1f} ms")
        for n in st["nodes"]:
            if n["seq_bytes"] or n["random_reqs"] or n["net_bytes"]:
                ev.append(f"node {n['node']}: seq {n['seq_bytes'] / 2**20:.1f} MiB, random {int(n['random_reqs'])} "
                          f"reqs ({n['random_bytes'] / 2**20:.1f} MiB), net {n['net_bytes'] / 2**20:.1f} MiB")
        kernel = kernel_evidence(kernel_rows.get(sid, []), kernel_counts.get(sid, {}))
        if kernel:
            ev.append(kernel)
        add(st, limit, explained, confidence, "; ".join(ev))
    con.close()
    return pa.Table.from_pydict(columns, schema=SCHEMAS["statement_class"])
