-- dbms_pid: the pids that ran statements: the tasks whose state the attribution follows.
--
-- builds:  dbms_pid
-- inputs:  statement_clean
-- columns: node, pid
CREATE TABLE dbms_pid AS SELECT DISTINCT node, pid FROM statement_clean;
