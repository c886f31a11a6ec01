-- statement_link: which coordinator statement each data node's statement served (a cluster capture;
-- links.py's docstring has why): the coordinator named its backend's pid in the application_name of
-- its postgres_fdw connections (`mwinv-fdw:<pid>`), and a backend runs one top-level statement at a
-- time, so a node's statement belongs to the statement its coordinator backend was running when the
-- node's statement began, that time put on the coordinator's clock with the node's offset, drift
-- interpolated linearly between the two measurements. Empty without a coordinator or sessions.
--
-- builds:  statement_link
-- inputs:  session, statement_clean, node_clock; the variable coordinator (the manifest's, or NULL)
-- columns: node, statement_id, parent_node, parent_statement_id, offset_ns, offset_error_ns
CREATE TABLE statement_link AS
WITH fdw AS (
    SELECT node, pid, TRY_CAST(regexp_extract(application_name, '^mwinv-fdw:(\d+)$', 1) AS INTEGER) AS coord_pid
    FROM session WHERE application_name LIKE 'mwinv-fdw:%'),
remote AS (
    SELECT s.node, s.statement_id, f.coord_pid, s.start_ns,
           CAST(c.off_s + (c.off_e - c.off_s) * greatest(0, least(1,
                (s.start_ns - c.off_s - c.at_s) / greatest(1, c.at_e - c.at_s))) AS BIGINT) AS off,
           greatest(c.err_s, c.err_e) AS err
    FROM statement_clean s JOIN fdw f USING (node, pid) JOIN node_clock c USING (node)
    WHERE coalesce(s.nesting_level, 0) = 0 AND s.node <> getvariable('coordinator')),
coord AS (
    SELECT pid, statement_id, start_ns FROM statement_clean
    WHERE node = getvariable('coordinator') AND coalesce(nesting_level, 0) = 0)
-- the coordinator sent it: it began after the coordinator's statement began, up to the error
SELECT r.node::VARCHAR AS node, r.statement_id::BIGINT AS statement_id,
       getvariable('coordinator')::VARCHAR AS parent_node, c.statement_id::BIGINT AS parent_statement_id,
       r.off::BIGINT AS offset_ns, r.err::BIGINT AS offset_error_ns
FROM remote r ASOF JOIN coord c ON r.coord_pid = c.pid AND r.start_ns - r.off + r.err >= c.start_ns;
