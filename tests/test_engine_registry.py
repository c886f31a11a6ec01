"""The engine registry: mwinv's engines register themselves, and an engine from outside the package
(tests/toy_engine/, installed as an entry point) plugs in without a change to the correlator, the
CLI or the demo: its command is listed, its reader fills a capture, its rule advises its statements.
No root, no server."""

import json
import os
import subprocess
import sys
from pathlib import Path

from mwinv.engines import registry
from mwinv.engines.mariadb.rules import MARIADB_RULES
from mwinv.engines.oracle.rules import ORACLE_RULES
from mwinv.engines.postgresql.rules import RULES

BIN = Path(sys.executable).parent
CSV = """start_ms,cpu_ms,lock_ms,wall_ms,text
0,10,80,100,UPDATE t SET a = 1
200,5,150,160,UPDATE t SET a = 2
400,30,0,40,SELECT * FROM t
"""


def test_mwinvs_engines_register_themselves():
    engines = registry.engines()
    assert {"postgresql", "mariadb", "oracle"} <= set(engines)
    assert registry.rules_for("oracle") is ORACLE_RULES and registry.rules_for("mariadb") is MARIADB_RULES
    assert registry.rules_for("postgresql") is RULES and registry.rules_for(None) is RULES
    assert engines["oracle"].load("cli").name == "oracle" and engines["oracle"].load("demo") is None
    assert engines["postgresql"].load("server").__name__ == "PgServer"


def _plugin(tmp_path: Path, name: str, target: str) -> dict:
    """An environment in which an installed distribution registers `name = target` as an engine."""
    dist = tmp_path / "site" / f"{name}_engine-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}-engine\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[mwinv.engines]\n{name} = {target}\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(dist.parent), str(Path(__file__).parent)])}


def _run(env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, env=env, timeout=120)


def test_a_toy_engine_plugs_in_from_outside(tmp_path):
    env = _plugin(tmp_path, "toy", "toy_engine:ENGINE")
    assert "toy " not in _run(os.environ, "mwinv", "--help").stdout   # not there without its entry point
    r = _run(env, "mwinv", "--help")
    assert r.returncode == 0 and "toy         The toy engine" in r.stdout, r.stderr
    (tmp_path / "s.csv").write_text(CSV)
    r = _run(env, "mwinv", "toy", "import", str(tmp_path / "s.csv"), "-o", str(tmp_path / "cap"))
    assert r.returncode == 0 and "3 statements" in r.stderr, r.stderr
    r = _run(env, "mwinv-correlate", str(tmp_path / "cap"), "--format", "json")
    assert r.returncode == 0, r.stderr
    advice = {q["text"]: [a["rule"] for a in q["advice"]] for q in json.loads(r.stdout)}
    # the toy's rule, instead of PostgreSQL's lock.wait, on the two statements that waited; none on the other
    assert advice == {"UPDATE t SET a = 2": ["toy.table_lock"], "UPDATE t SET a = 1": ["toy.table_lock"],
                      "SELECT * FROM t": []}
    (tmp_path / "bad.csv").write_text(CSV.replace("200,5", "2x0,5"))
    r = _run(env, "mwinv", "toy", "import", str(tmp_path / "bad.csv"), "-o", str(tmp_path / "bad"))
    assert r.returncode == 2 and f"mwinv: error: {tmp_path / 'bad.csv'}:3: start_ms" in r.stderr


def test_an_engine_registered_twice_is_a_one_line_error(tmp_path):
    env = _plugin(tmp_path, "pg", "mwinv.engines.postgresql:ENGINE")
    r = _run(env, "mwinv", "--help")
    assert r.returncode == 2 and r.stderr == ("mwinv: error: engine 'postgresql' registered twice: "
                                              "mwinv.engines.postgresql:ENGINE and entry point pg = "
                                              "mwinv.engines.postgresql:ENGINE\n")
