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
    (["--scale", "0"], "scale factor must be > 0"),
    (["--scale", "-0.5"], "scale factor must be > 0"),
])
def test_bad_input_is_one_line_error(args, message):
    proc = subprocess.run([BIN / "mwinv", "tpch", *args], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


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
