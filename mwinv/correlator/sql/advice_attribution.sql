-- advice_attribution: each example's attribution, its executions' summed per component.
--
-- builds:  advice_attribution
-- inputs:  statement_attribution, advice_member
-- scope:   request
-- columns: node, statement_id (the example's), query_id, component, ns, from_workers_ns
CREATE TABLE advice_attribution AS
SELECT any_value(a.node) AS node, m.key AS statement_id, any_value(a.query_id) AS query_id, a.component,
       sum(a.ns)::BIGINT AS ns, sum(a.from_workers_ns)::BIGINT AS from_workers_ns
FROM statement_attribution a JOIN advice_member m USING (statement_id) GROUP BY m.key, a.component;
