"""PostgreSQL: the reader of the `mwinv` extension's ring (`reader`) and of its USDT probes
(`probes`), its throw-away test servers (`server`), its advice rules (`rules`) and its demo (`demo`)."""

from mwinv.engines.registry import Registration

ENGINE = Registration(
    name="postgresql",
    capture="mwinv.engines.postgresql.kernel:POSTGRESQL",
    reader="mwinv.engines.postgresql.capture:statement_drainer",
    server="mwinv.engines.postgresql.server:PgServer",
    rules="mwinv.engines.postgresql.rules:RULES",
    demo="mwinv.engines.postgresql.demo:demo",
)
