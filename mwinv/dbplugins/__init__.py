"""Readers of DBMS-side statement records (one module per DBMS) into the capture tables
`statement` and `statement_text`."""
