"""Oracle: extended SQL trace files (event 10046) read into the capture tables (`trace10046`,
`executions`, `importer`), the profiles Oracle DBAs read (`profile`), a session hook that turns the
trace on and fetches the file (`session`), its advice rules (`rules`) and its commands (`cli`)."""

from mwinv.engines.registry import Registration

ENGINE = Registration(
    name="oracle",
    reader="mwinv.engines.oracle.importer:import_files",
    rules="mwinv.engines.oracle.rules:ORACLE_RULES",
    cli="mwinv.engines.oracle.cli:oracle_cli",
)
