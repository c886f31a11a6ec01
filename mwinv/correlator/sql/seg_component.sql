-- seg_component: per statement and component the nanoseconds its pid's segments spent (the sum over
-- the time slices), on its node's name.
--
-- builds:  seg_component
-- inputs:  seg_component_part, dbms_node
-- columns: node, statement_id, component, ns
CREATE TABLE seg_component AS
SELECT n.node, p.statement_id, p.component, sum(p.ns)::BIGINT AS ns
FROM seg_component_part p JOIN dbms_node n ON n.code = p.node GROUP BY ALL;
