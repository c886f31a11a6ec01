-- model_attribution: the attribution as the model, the classifier and the report read it.
--
-- builds:  model_attribution
-- inputs:  statement_attribution
-- columns: statement_attribution's
CREATE VIEW model_attribution AS SELECT * FROM statement_attribution;
