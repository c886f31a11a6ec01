"""Oracle: extended SQL trace files (event 10046) read into the capture tables (`trace10046`,
`executions`, `importer`), the profiles Oracle DBAs read (`profile`), and a session hook that turns
the trace on and fetches the file (`session`)."""
