/* mwinv--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION mwinv" to load this file. \quit

-- One statement execution (NULL: not visible to this role, or not measured).
CREATE TYPE mwinv_record AS (
    statement_id bigint, parent_statement_id bigint, query_id bigint,
    pid integer, leader_pid integer, database text, username text,
    start_ns bigint, end_ns bigint, start_wall_ns bigint, plan_ns bigint,
    cpu_user_ns bigint, cpu_sys_ns bigint, read_bytes bigint, write_bytes bigint,
    minflt bigint, majflt bigint, inblock bigint, oublock bigint,
    nvcsw bigint, nivcsw bigint, rows bigint, nesting_level integer,
    errored boolean, utility boolean);

-- Takes up to max_records records out of the ring (consumes them).
CREATE FUNCTION mwinv_drain(max_records integer DEFAULT NULL)
RETURNS SETOF mwinv_record
AS 'MODULE_PATHNAME', 'mwinv_drain'
LANGUAGE C CALLED ON NULL INPUT VOLATILE PARALLEL RESTRICTED;

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
REVOKE ALL ON FUNCTION mwinv_reset() FROM PUBLIC;
GRANT SELECT ON mwinv_statements, mwinv_texts, mwinv_info TO PUBLIC;
