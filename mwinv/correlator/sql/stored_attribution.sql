-- stored_attribution: statement_attribution's rows but those of the statements of their rusage alone
-- (rusage_attribution's, expanded as they are read: tables.rusage_rows), what its parts hold:
-- summed_attribution's, where a coordinator statement with remote parts (statement_link) has its
-- other_wait as remote_wait. It sleeps in epoll_wait on its nodes' sockets (postgres_fdw's async append),
-- which the attribution alone calls other_wait: that wait is the nodes' work and the links (its parts on
-- each node tell which). A synchronous fetch waits in poll(), which stays network. (A statement of its
-- rusage alone has no other_wait: moving it would change nothing.) A view: a copy of the 12 rows per
-- statement took 4.0 of 51 s on a 3.5 M statement capture; a read joins the few parents. The moved sums
-- are cast back to BIGINT: HUGEINT columns went to the writer as decimals, cast row by row (124 M rows
-- written in 13.0 s, 10.7 s as BIGINT). A merge reads the nodes' stored rows as its summed_attribution.
--
-- builds:  stored_attribution
-- inputs:  summed_attribution, statement_link
-- columns: node, statement_id, query_id, component, ns, from_workers_ns
CREATE VIEW stored_attribution AS
WITH parents AS (SELECT DISTINCT parent_node AS node, parent_statement_id AS statement_id FROM statement_link),
-- a parent's other_wait and remote_wait, summed into its one remote_wait row
moved AS (
    SELECT a.node, a.statement_id, any_value(a.query_id) AS query_id, sum(a.ns)::BIGINT AS ns,
           sum(a.from_workers_ns)::BIGINT AS from_workers_ns
    FROM summed_attribution a JOIN parents USING (node, statement_id)
    WHERE a.component IN ('other_wait', 'remote_wait') GROUP BY a.node, a.statement_id)
SELECT a.node, a.statement_id, a.query_id, a.component, a.ns, a.from_workers_ns
FROM summed_attribution a LEFT JOIN moved m USING (node, statement_id)
WHERE m.statement_id IS NULL OR a.component NOT IN ('other_wait', 'remote_wait')
UNION ALL
SELECT node, statement_id, query_id, 'remote_wait', ns, from_workers_ns FROM moved;
