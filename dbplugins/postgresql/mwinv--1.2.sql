/* mwinv--1.2.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION mwinv" to load this file. \quit

-- One statement execution (NULL: not visible to this role, or not measured).
CREATE TYPE mwinv_record AS (
    statement_id bigint, parent_statement_id bigint, query_id bigint,
    pid integer, leader_pid integer, database text, username text,
    start_ns bigint, end_ns bigint, start_wall_ns bigint, plan_ns bigint,
    parse_ns bigint, client_wait_ns bigint,
    cpu_user_ns bigint, cpu_sys_ns bigint, read_bytes bigint, write_bytes bigint,
    minflt bigint, majflt bigint, inblock bigint, oublock bigint,
    nvcsw bigint, nivcsw bigint, rows bigint, nesting_level integer,
    errored boolean, utility boolean);

-- Takes up to max_records records out of the ring (consumes them).
CREATE FUNCTION mwinv_drain(max_records integer DEFAULT NULL)
RETURNS SETOF mwinv_record
AS 'MODULE_PATHNAME', 'mwinv_drain'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;

-- Takes up to max_records records out of the ring as raw bytes (the layout: mwinv_record_layout()).
CREATE FUNCTION mwinv_drain_raw(max_records integer DEFAULT NULL)
RETURNS bytea
AS 'MODULE_PATHNAME', 'mwinv_drain_raw'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;

CREATE FUNCTION mwinv_record_layout(OUT field text, OUT "offset" integer, OUT size integer)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'mwinv_record_layout'
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;

-- The unread records, left in the ring.
CREATE FUNCTION mwinv_peek()
RETURNS SETOF mwinv_record
AS 'MODULE_PATHNAME', 'mwinv_peek'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

CREATE VIEW mwinv_statements AS SELECT * FROM mwinv_peek();

-- One text per query id (the first execution's text).
CREATE FUNCTION mwinv_query_texts(OUT query_id bigint, OUT username text, OUT database text,
    OUT query text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'mwinv_query_texts'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

CREATE VIEW mwinv_texts AS SELECT * FROM mwinv_query_texts();

-- Ring state: records written, read, pending, dropped (ring full), texts kept and dropped.
CREATE FUNCTION mwinv_info(OUT buffer_size bigint, OUT written bigint, OUT read bigint,
    OUT pending bigint, OUT dropped bigint, OUT texts bigint, OUT texts_dropped bigint,
    OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'mwinv_info'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

CREATE VIEW mwinv_info AS SELECT * FROM mwinv_info();

CREATE FUNCTION mwinv_reset() RETURNS void
AS 'MODULE_PATHNAME', 'mwinv_reset'
LANGUAGE C STRICT VOLATILE PARALLEL RESTRICTED;

-- Draining consumes records for everybody: only for pg_read_all_stats (and superusers).
REVOKE ALL ON FUNCTION mwinv_drain(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mwinv_drain(integer) TO pg_read_all_stats;
REVOKE ALL ON FUNCTION mwinv_drain_raw(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mwinv_drain_raw(integer) TO pg_read_all_stats;
REVOKE ALL ON FUNCTION mwinv_reset() FROM PUBLIC;
GRANT SELECT ON mwinv_statements, mwinv_texts, mwinv_info TO PUBLIC;

-- CLOCK_MONOTONIC of this server's host, in ns (the records' clock): a node's clock offset.
CREATE FUNCTION mwinv_clock_ns() RETURNS bigint
AS 'MODULE_PATHNAME', 'mwinv_clock_ns'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

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
