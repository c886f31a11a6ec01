"""MariaDB / MySQL: throw-away servers (`server`), TPC-H in MariaDB's dialect (`tpch`), the
performance_schema reader (`reader`, `capture`), the slow query log (`slowlog`), its advice rules
(`rules`), its commands (`cli`) and its demo (`demo`)."""

from mwinv.engines.registry import Registration

ENGINE = Registration(
    name="mariadb",
    capture="mwinv.engines.mariadb.kernel:MARIADB",
    reader="mwinv.engines.mariadb.slowlog:read",
    server="mwinv.engines.mariadb.server:MariaDBServer",
    rules="mwinv.engines.mariadb.rules:MARIADB_RULES",
    cli="mwinv.engines.mariadb.cli:mariadb_cli",
    demo="mwinv.engines.mariadb.demo:demo",
)
