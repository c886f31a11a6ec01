-- seg_off_stack: per statement and kernel stack its sleeping stretches (the sum over the time slices).
--
-- builds:  seg_off_stack
-- inputs:  seg_off_stack_part, dbms_node
-- columns: node, statement_id, stack_id, segments, ns
CREATE TABLE seg_off_stack AS
SELECT n.node, p.statement_id, p.stack_id, sum(p.segments)::BIGINT AS segments, sum(p.ns)::BIGINT AS ns
FROM seg_off_stack_part p JOIN dbms_node n ON n.code = p.node GROUP BY ALL;
