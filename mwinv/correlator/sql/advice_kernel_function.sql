-- advice_kernel_function: each example's kernel hot spots, its executions' summed per source and function.
--
-- builds:  advice_kernel_function
-- inputs:  statement_kernel_function, advice_member
-- scope:   request
-- columns: statement_kernel_function's
CREATE TABLE advice_kernel_function AS
SELECT any_value(k.node) AS node, m.key AS statement_id, any_value(k.query_id) AS query_id, k.function,
       any_value(k.stack) AS stack, sum(k.samples)::BIGINT AS samples, sum(k.ns)::BIGINT AS ns,
       sum(k.ns) / sum(sum(k.ns)) OVER (PARTITION BY m.key, k.source) AS share, k.source
FROM statement_kernel_function k JOIN advice_member m USING (statement_id) GROUP BY m.key, k.source, k.function;
