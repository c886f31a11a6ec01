"""Lifecycle (issue 29): signals during a stop never leave kernel tracing state behind and are acted on
promptly, a capture killed with -9 is finished by the next correlation, and an empty statement table is
said like a missing one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mwinv.capture.tables import SCHEMAS, Capture, empty_table

BIN = Path(sys.executable).parent


def test_empty_statement_table_warns_like_a_missing_one(tmp_path):
    cap = Capture(tmp_path / "cap").create()
    missing = subprocess.run([BIN / "mwinv-correlate", str(cap.path)], capture_output=True, text=True)
    assert missing.returncode == 0 and "table statement: missing" in missing.stderr, missing.stderr
    cap.write_part("statement", empty_table(SCHEMAS["statement"]), node="db1")
    empty = subprocess.run([BIN / "mwinv-correlate", str(cap.path)], capture_output=True, text=True)
    assert empty.returncode == 0, empty.stderr
    assert "top 0 statements" in empty.stdout
    assert "warning: table statement: empty (1 parts, no rows)" in " ".join(empty.stderr.split()), empty.stderr
