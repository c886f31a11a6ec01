"""The benchmarks: `python -m bench` lists them, `python -m bench NAME [ARGS...]` runs one (ARGS go
to it; `python -m bench NAME --help` shows its options), `python -m bench all` runs each with its
defaults, one after the other.

    python -m bench
    python -m bench correlate measure --only mwinv
    python -m bench.bench_correlate --help        # the same module, run directly
"""

from __future__ import annotations

import importlib
import runpy
import sys

BENCHMARKS = ("extension", "trace", "parse", "correlate", "mariadb", "cluster", "oltp", "long")


def summary(name: str) -> str:
    """The first sentence of the benchmark module's docstring."""
    doc = importlib.import_module(f"bench.bench_{name}").__doc__ or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return first.split(". ")[0].split(": ")[0].rstrip(".")


def run(name: str, args: list[str]) -> None:
    sys.argv = [f"bench.bench_{name}", *args]
    from mwinv.errors import MwinvError

    try:
        runpy.run_module(f"bench.bench_{name}", run_name="__main__", alter_sys=True)
    except SystemExit as exc:  # click and argparse end with sys.exit()
        if exc.code not in (None, 0):
            raise
    except MwinvError as exc:   # a bad input or a failed step: one line
        sys.exit(f"bench {name}: error: {exc}")


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        for name in BENCHMARKS:
            print(f"  {name:<10} {summary(name)}")
        return
    name, args = argv[0], argv[1:]
    if name == "all":
        for each in BENCHMARKS:
            print(f"== python -m bench {each}", flush=True)
            run(each, [])
        return
    name = name.removeprefix("bench_")
    if name not in BENCHMARKS:
        sys.exit(f"bench: error: unknown benchmark {name!r} (choose from {', '.join(BENCHMARKS)}, all)")
    run(name, args)


if __name__ == "__main__":
    main(sys.argv[1:])
