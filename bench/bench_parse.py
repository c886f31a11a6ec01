"""Parse throughput: events/s from trace.dat into Parquet (mwinv-trace parse) vs `trace-cmd report`
text of the same file, side by side in one run, plus each one's peak RSS.

The input is the PostgreSQL TPC-H trace recorded here (tests/golden), its per-CPU ring-buffer pages
replicated until the file holds >= --events events (same page contents, so the same event mix:
scheduler, syscalls, block, network, 13 % stack records).

    python -m bench.bench_parse [--events 3000000]
"""

from __future__ import annotations

import argparse
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mwinv.kernel_trace.parse import count_events
from mwinv.kernel_trace.tracedat import read_tracedat, write_tracedat

GOLDEN = Path(__file__).parents[1] / "tests" / "golden"


def build_trace(out_dir: Path, min_events: int) -> tuple[Path, int]:
    src = out_dir / "golden.dat"
    src.write_bytes(lzma.decompress((GOLDEN / "pg_tpch_q6_q3.trace.dat.xz").read_bytes()))
    td = read_tracedat(src)
    base = count_events(src)
    reps = -(-min_events // base)
    data = src.read_bytes()
    cpu_files = []
    for c in td.cpus:
        f = out_dir / f"cpu{c.cpu}.raw"
        f.write_bytes(data[c.offset:c.offset + c.size] * reps)
        cpu_files.append(f)
    formats = [(fmt.system, "") for fmt in td.formats.values()]  # replaced below by the file's own texts
    formats = _format_texts(src)
    out = out_dir / "big.dat"
    write_tracedat(out, {"header_page": td.header_page.encode(), "header_event": td.header_event.encode()},
                   formats, cpu_files, f"[{td.clock}]\n", td.kallsyms, b"", td.uname, td.page_size)
    return out, base * reps


def _format_texts(path: Path) -> list[tuple[str, str]]:
    """(system, format text) of every event format in a trace.dat, in file order."""
    import struct

    with open(path, "rb") as f:
        f.read(10)
        while f.read(1) != b"\0":
            pass
        f.read(6)
        for _ in range(2):
            while f.read(1) != b"\0":
                pass
            f.read(struct.unpack("<Q", f.read(8))[0])
        out = []
        for _ in range(struct.unpack("<I", f.read(4))[0]):
            out.append(("ftrace", f.read(struct.unpack("<Q", f.read(8))[0]).decode()))
        for _ in range(struct.unpack("<I", f.read(4))[0]):
            system = b""
            while (c := f.read(1)) != b"\0":
                system += c
            for _ in range(struct.unpack("<I", f.read(4))[0]):
                out.append((system.decode(), f.read(struct.unpack("<Q", f.read(8))[0]).decode()))
    return out


def timed(cmd: list[str], **kw) -> tuple[float, int]:
    """(wall seconds, peak RSS MB) of one child process (wait4: its own rusage, not the max over
    all children so far)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, **kw)
    _, status, usage = os.wait4(proc.pid, 0)
    dt = time.monotonic() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    return dt, usage.ru_maxrss // 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=3_000_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mwinv-bench-parse-"))
    try:
        trace, n = build_trace(tmp, args.events)
        size_mb = trace.stat().st_size / 2**20
        print(f"trace: {n:,} events, {size_mb:.0f} MB ({trace})")
        bindir = Path(sys.executable).parent
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
        # taskset: one core, as the goal says
        parse = ["taskset", "-c", "0", str(bindir / "mwinv-trace"), "parse"]
        ours, ours_rss = timed(parse + [str(trace), "--out", str(tmp / "cap")], env=env, stderr=subprocess.DEVNULL)
        # the fixed part (interpreter, imports, kernel symbols): the small original trace alone
        fixed, _ = timed(parse + [str(tmp / "golden.dat"), "--out", str(tmp / "small")], env=env,
                         stderr=subprocess.DEVNULL)
        theirs, theirs_rss = timed(["taskset", "-c", "0", "trace-cmd", "report", str(trace)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        parquet_mb = sum(p.stat().st_size for p in (tmp / "cap").rglob("*.parquet")) / 2**20
        print(f"{'':28} {'seconds':>8} {'M events/s':>11} {'peak RSS MB':>12}")
        print(f"{'mwinv-trace parse -> Parquet':28} {ours:8.2f} {n / ours / 1e6:11.2f} {ours_rss:12d}")
        print(f"{'trace-cmd report -> text':28} {theirs:8.2f} {n / theirs / 1e6:11.2f} {theirs_rss:12d}")
        print(f"ratio (mwinv / trace-cmd events/s): {theirs / ours:.2f}x; Parquet {parquet_mb:.1f} MB "
              f"(includes interpreter start-up and the Parquet writes)")
        print(f"fixed cost (a {count_events(tmp / 'golden.dat'):,}-event trace): {fixed:.2f} s; "
              f"beyond it: {n / max(ours - fixed, 1e-9) / 1e6:.2f} M events/s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
