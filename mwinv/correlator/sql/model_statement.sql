-- model_statement: the statements as the model, the classifier and the report read them: statement_clean,
-- where a data node's statement linked to a coordinator statement (statement_link) is its
-- sub-statement (the model's per-node rows: [Taufer]'s max over the nodes and the coordinator).
--
-- builds:  model_statement
-- inputs:  statement_clean, statement_link
-- columns: statement_clean's
CREATE VIEW model_statement AS
SELECT s.* REPLACE (coalesce(l.parent_statement_id, s.parent_statement_id) AS parent_statement_id)
FROM statement_clean s LEFT JOIN statement_link l USING (node, statement_id);
