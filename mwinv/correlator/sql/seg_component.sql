-- seg_component: per statement and component the nanoseconds its pid's segments spent (the sum over
-- the time slices), on its node's name, with the statement's slice key (slice_statement) and ordered by
-- it: summed_statement reads it one statement slice at a time, for the statements a trace window
-- covers whole only (the others' come from their rusage), so only theirs are kept: a duty-cycled
-- capture's others are ~90 % of its statements.
--
-- builds:  seg_component
-- inputs:  seg_component_part, dbms_node, slice_statement
-- columns: key_ns, node, statement_id, component, ns
CREATE TABLE seg_component AS
SELECT s.key_ns, c.node, c.statement_id, c.component, c.ns
FROM (SELECT n.node, p.statement_id, p.component, sum(p.ns)::BIGINT AS ns
      FROM seg_component_part p JOIN dbms_node n ON n.code = p.node GROUP BY ALL) c
JOIN slice_statement s USING (node, statement_id)
WHERE s.traced
ORDER BY s.key_ns;
