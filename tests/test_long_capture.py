"""Long captures (issue 33): DuckDB's memory limit as an option, with a one-line error naming it when
it is too low, on the project's small real capture (tests/golden/pg_small_capture)."""

import shutil
import subprocess
import sys
from pathlib import Path

from tests.test_golden_capture import CAPTURE, derived_tables

CLI = Path(sys.executable).parent / "mwinv-correlate"


def _correlate(cap: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLI), str(cap), "--format", "json", *args],
                          capture_output=True, text=True, timeout=300)


def test_memory_limit_too_low_is_one_line_naming_the_option_and_keeps_the_tables(tmp_path):
    cap = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap)
    assert _correlate(cap).returncode == 0
    before = derived_tables(cap)
    r = _correlate(cap, "--memory", "1MB")
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("mwinv-correlate: error: Out of Memory Error") and "--memory" in lines[-1], r.stderr
    assert "Traceback" not in r.stderr
    assert derived_tables(cap) == before   # the earlier correlation's tables stay
    assert not list(cap.glob(".duckdb-spill-*"))   # its spill directory, inside the capture, is gone


def test_a_moderate_memory_limit_gives_the_same_tables_as_the_default(tmp_path):
    small, default = tmp_path / "small", tmp_path / "default"
    shutil.copytree(CAPTURE, small)
    shutil.copytree(CAPTURE, default)
    a, b = _correlate(small, "--memory", "64MB"), _correlate(default)
    assert a.returncode == 0 and b.returncode == 0, a.stderr[-2000:] + b.stderr[-2000:]
    assert a.stdout == b.stdout
    assert derived_tables(small) == derived_tables(default)


def test_a_bad_memory_size_is_refused_before_anything_starts(tmp_path):
    cap = tmp_path / "cap"
    shutil.copytree(CAPTURE, cap)
    r = _correlate(cap, "--memory", "lots")
    assert r.returncode == 2 and r.stderr.strip() == "mwinv-correlate: error: --memory 'lots': a size such as " \
                                                      "512MB or 2GB"
    assert not (cap / "statement_attribution").exists()
