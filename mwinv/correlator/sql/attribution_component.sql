-- attribution_component: the attribution's components (ATTRIBUTION_COMPONENTS), one row each: a table,
-- so that a join with them has its true size to plan by (local_attribution's cross join; an unnest of
-- the variable in a subquery was planned as one row, and the readers of the view hashed its side).
--
-- builds:  attribution_component
-- inputs:  (none); the variable components (ATTRIBUTION_COMPONENTS, in order)
-- columns: component
CREATE TABLE attribution_component AS SELECT unnest(getvariable('components')) AS component;
