"""How fast this machine's memory is right now, printed beside a benchmark's figures.

On the project's VM the hypervisor probably backs guest memory lazily and takes freed memory back: the
first write to fresh memory (a page fault per 4 KiB) ran at ~29 MB/s on 2026-11-23, against ~6.5 GB/s
for memory already touched. A program's time then follows how much fresh memory it touches, not its work."""

from __future__ import annotations

import time

import numpy as np


def memory_rates(mb: int = 64) -> tuple[float, float]:
    """MB/s of writing `mb` MiB of fresh memory (first touch) and of writing the same memory again."""
    values = np.empty(mb * 2**20 // 8)   # above glibc's largest mmap threshold: always fresh pages
    t0 = time.perf_counter()
    values.fill(1.0)
    t1 = time.perf_counter()
    values.fill(2.0)
    t2 = time.perf_counter()
    return mb / (t1 - t0), mb / (t2 - t1)


def memory_line() -> str:
    first, again = memory_rates()
    return f"memory now: first write to fresh memory {first:,.0f} MB/s, rewrite {again:,.0f} MB/s"
