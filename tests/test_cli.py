import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("tool", ["mwinv", "mwinv-trace", "mwinv-sample", "mwinv-correlate"])
def test_help(tool):
    proc = subprocess.run([BIN / tool, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "Usage:" in proc.stdout


@pytest.mark.parametrize("args,message", [
    (["--queries", "23"], "unknown TPC-H query 23"),
    (["--scale", "0"], "scale factor must be a finite number > 0, got 0"),
    (["--scale", "-0.5"], "scale factor must be a finite number > 0, got -0.5"),
])
def test_bad_input_is_one_line_error(args, message):
    proc = subprocess.run([BIN / "mwinv", "tpch", *args], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_experiment_memory_is_checked_before_anything_starts(tmp_path):
    """`mwinv experiment run --memory` sets the cells' correlation limit (a cell of 135 M kernel events ran
    out of the default 768 MiB): a size it cannot read is one line before any cluster starts."""
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "m"\nscale = 0.01\nqueries = [6]\n[factors]\nnodes = [1]\n')
    proc = subprocess.run([BIN / "mwinv", "experiment", "run", str(plan), "-o", str(tmp_path / "out"), "--memory",
                           "lots"], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == ["mwinv: error: --memory 'lots': a size such as 512MB or 2GB"]
    assert not (tmp_path / "out").exists()


def test_port_in_use_cli(pg):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = subprocess.run([BIN / "mwinv", "tpch", "--scale", "0.01", "--queries", "6", "--port", str(port)],
                              capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"port {port} is in use" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args,message", [
    (["--interval", "0.001"], "sampling interval 0.001 s: 0.01 s or more"),
    (["--node", "../elsewhere"], "node name '../elsewhere': letters, digits"),
    (["--duty", "0"], "duty cycle 0 of 1 s windows"),
    (["--window", "-1", "--duty", "0.5"], "duty cycle 0.5 of -1 s windows"),
    (["--event-budget", "-5"], "event budget -5/s per CPU"),
])
def test_capture_options_are_checked_before_anything_starts(tmp_path, args, message):
    """A bad capture option is a one-line error before the capture starts: nothing is written (a sampling
    interval under the sampler's minimum was a traceback after the capture directory was made)."""
    out = tmp_path / "cap"
    proc = subprocess.run([BIN / "mwinv-trace", "capture", str(out), "--pids", str(os.getpid()), "--no-trace",
                           "--duration", "0.2", *args], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith(f"mwinv-trace: error: {message}"), proc.stderr
    assert proc.stderr.count("\n") == 1 and not out.exists()


def test_correlate_options_are_checked_before_anything_is_replaced(tmp_path):
    """A node the capture does not have is a one-line error, and the capture's derived tables stay (they
    were replaced by empty ones); so are a bad node name, --node with --merge, and --top-sql 0."""
    from mwinv.capture.tables import Capture

    log = sorted((Path(__file__).parent / "golden" / "mysql_slowlog").glob("*.log"))[0]
    cap = Capture(tmp_path / "cap")
    for argv in (["mwinv", "mariadb", "slowlog", str(log), "-o", str(cap.path), "--node", "db1"],
                 ["mwinv-correlate", str(cap.path)]):
        assert subprocess.run([BIN / argv[0], *argv[1:]], capture_output=True).returncode == 0
    attributed = cap.read("statement_attribution").num_rows
    assert attributed > 0
    for args, message in [(["--node", "db2"], "node 'db2': not in this capture (its nodes: db1)"),
                          (["--node", "../db1"], "node '../db1': not in this capture"),
                          (["--node", "db1", "--merge"], "--node correlates one node, --merge all of them"),
                          (["--top-sql", "0"], "top 0: 1 or more statements")]:
        proc = subprocess.run([BIN / "mwinv-correlate", str(cap.path), *args], capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.startswith(f"mwinv-correlate: error: {message}"), proc.stderr
        assert proc.stderr.count("\n") == 1
    assert cap.read("statement_attribution").num_rows == attributed
