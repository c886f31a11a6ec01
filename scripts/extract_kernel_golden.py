"""Extract a correlated capture's kernel hot spots, with the statements and attribution rows they belong
to, into a JSON file the kernel-knob rules are tested on with no root (tests/test_kernel_knobs.py).

Example:
    python scripts/extract_kernel_golden.py out/demo/capture tests/golden/pg_tpch_demo.kernel.json
    python scripts/extract_kernel_golden.py CAPTURE tests/golden/pg_pgbench_ctas.kernel.json 20
"""

from __future__ import annotations

import json
import sys

import duckdb

from mwinv.correlator.load import literal


def main(capture: str, out: str, min_samples: int = 0) -> None:
    """min_samples: keep only the statements with a source of that many samples (20: those the rules rank)."""
    con = duckdb.connect()
    for t in ("statement", "statement_attribution", "statement_kernel_function"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet({literal(f'{capture}/{t}/**/*.parquet')})")

    def rows(sql: str) -> list[dict]:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    keep = ("statement_id IN (SELECT statement_id FROM statement_kernel_function GROUP BY statement_id, source "
            f"HAVING sum(samples) >= {int(min_samples)})")
    manifest = json.load(open(f"{capture}/manifest.json"))
    data = {"manifest": {k: manifest[k] for k in ("cpus", "calibration", "settings", "storage")
                             if k in manifest},
            "tracer": {n: {"tracer": v.get("tracer"), "skipped": v.get("skipped")}
                       for n, v in manifest["nodes"].items()},
            "statement": rows(f"SELECT * FROM statement WHERE {keep} ORDER BY statement_id"),
            "statement_attribution": rows(f"SELECT * FROM statement_attribution WHERE {keep} ORDER BY ALL"),
            "statement_kernel_function": rows(f"SELECT * FROM statement_kernel_function WHERE {keep} ORDER BY ALL")}
    with open(out, "w") as f:
        json.dump(data, f, indent=0, default=str)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:4]))
