#!/usr/bin/env bash
# pg_regress tests of the mwinv extension: start a throw-away server with
# shared_preload_libraries=mwinv, run `make installcheck` against it, always stop it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
exec "$PY" - <<'PYEOF'
import os
import subprocess
import sys

from mwinv.engines.postgresql.server import PgServer

gucs = {"compute_query_id": "on", "mwinv.track": "top"}
with PgServer(name="installcheck", shared_preload_libraries=["mwinv"], gucs=gucs) as server:
    env = dict(os.environ, PGHOST=str(server.socket_dir), PGPORT=str(server.port), PGUSER="postgres")
    rc = subprocess.run(["make", "-C", "dbplugins/postgresql", "installcheck"], env=env).returncode
    if rc != 0:
        diffs = "dbplugins/postgresql/regression.diffs"
        if os.path.exists(diffs):
            sys.stdout.write(open(diffs).read())
sys.exit(rc)
PYEOF
