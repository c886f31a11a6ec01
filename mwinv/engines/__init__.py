"""What mwinv knows of each DBMS engine, one package per engine: how to read its statements (and
its own wait events, where it has them) into the capture tables. The code that runs inside a DBMS
(the PostgreSQL extension) lives apart, under `dbplugins/`."""
