/* mwinv--1.1--1.2.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION mwinv UPDATE TO '1.2'" to load this file. \quit

-- A process on this host (reader_pid) maps the ring file and consumes records itself until it
-- detaches or exits; mwinv_drain() meanwhile refuses.  ring_file NULL: not in a file, use SQL.
CREATE FUNCTION mwinv_ring_attach(reader_pid integer, OUT ring_file text, OUT token bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'mwinv_ring_attach'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

CREATE FUNCTION mwinv_ring_detach(reader_pid integer) RETURNS boolean
AS 'MODULE_PATHNAME', 'mwinv_ring_detach'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

REVOKE ALL ON FUNCTION mwinv_ring_attach(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mwinv_ring_attach(integer) TO pg_read_all_stats;
REVOKE ALL ON FUNCTION mwinv_ring_detach(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mwinv_ring_detach(integer) TO pg_read_all_stats;
