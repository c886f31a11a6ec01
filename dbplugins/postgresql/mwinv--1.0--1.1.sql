/* mwinv--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION mwinv UPDATE TO '1.1'" to load this file. \quit

-- A record gained parse_ns and client_wait_ns after plan_ns (the library of 1.1 returns them in that
-- order): the type and what returns it are made again.
DROP VIEW mwinv_statements;
DROP FUNCTION mwinv_drain(integer);
DROP FUNCTION mwinv_peek();
DROP TYPE mwinv_record;
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

-- CLOCK_MONOTONIC of this server's host, in ns (the records' clock): a node's clock offset.
CREATE FUNCTION mwinv_clock_ns() RETURNS bigint
AS 'MODULE_PATHNAME', 'mwinv_clock_ns'
LANGUAGE C STRICT VOLATILE PARALLEL SAFE;

REVOKE ALL ON FUNCTION mwinv_drain(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mwinv_drain(integer) TO pg_read_all_stats;
REVOKE ALL ON FUNCTION mwinv_drain_raw(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION mwinv_drain_raw(integer) TO pg_read_all_stats;
GRANT SELECT ON mwinv_statements TO PUBLIC;
