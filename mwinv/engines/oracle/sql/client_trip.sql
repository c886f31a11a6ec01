-- client_trip: each round trip a traced session made to its client that answered a call returning data
-- (a FETCH or a LOB read): the calls since the session's previous SQL*Net message from client, the
-- bytes the server sent for them and what the trip cost in SQL*Net waits. A trip ends with the message
-- from client that follows those calls. Its bytes are the #bytes of its 'SQL*Net more data to client'
-- and 'vector data to client' waits: the first packet of a reply is not in the trace ('SQL*Net message
-- to client' always says #bytes=1), so a trip with none sent less than one packet (the session data
-- unit, ~8 KB: the more-data packets of tests/golden/oracle_10046 carry 8,051..8,312 bytes).
--
-- inputs:  dbms_wait, dbms_call
-- columns: node, pid, file (the trace file), line (its message from client), statement_id (of its first FETCH; NULL: a
--          LOB read alone), fetches, rows, packets (more-data and vector-data waits), bytes (theirs),
--          send_ns (its SQL*Net waits to the client), reply_ns (the message from client ending it),
--          cost_ns (send_ns + reply_ns)
CREATE OR REPLACE TABLE client_trip AS
WITH reply AS (
    SELECT node, pid, file, line, end_ns, ela_ns,
           lag(end_ns) OVER (PARTITION BY node, pid, file ORDER BY end_ns, line) AS after_ns
    FROM dbms_wait WHERE event = 'SQL*Net message from client'),
answered AS (
    SELECT r.node, r.pid, r.file, r.line, count(*) FILTER (WHERE c.call = 'FETCH') AS fetches,
           coalesce(sum(c.r) FILTER (WHERE c.call = 'FETCH'), 0) AS rows,
           min(c.statement_id) FILTER (WHERE c.call = 'FETCH') AS statement_id
    FROM reply r JOIN dbms_call c ON c.node = r.node AND c.pid = r.pid AND c.file = r.file
         AND c.end_ns > coalesce(r.after_ns, c.end_ns - 1) AND c.end_ns <= r.end_ns - r.ela_ns
    WHERE (c.call = 'FETCH' AND c.dep = 0) OR c.call = 'LOBREAD'
    GROUP BY ALL),
sent AS (
    SELECT r.node, r.pid, r.file, r.line, count(*) FILTER (WHERE w.event <> 'SQL*Net message to client') AS packets,
           coalesce(sum(TRY_CAST(w.p2 AS BIGINT)) FILTER (WHERE w.event <> 'SQL*Net message to client'), 0) AS bytes,
           sum(w.ela_ns) AS send_ns
    FROM reply r JOIN dbms_wait w ON w.node = r.node AND w.pid = r.pid AND w.file = r.file
         AND w.end_ns > coalesce(r.after_ns, w.end_ns - 1) AND w.end_ns <= r.end_ns - r.ela_ns
    WHERE w.event IN ('SQL*Net message to client', 'SQL*Net more data to client', 'SQL*Net vector data to client')
    GROUP BY ALL)
SELECT r.node, r.pid, r.file, r.line, a.statement_id, a.fetches, a.rows, coalesce(s.packets, 0) AS packets,
       coalesce(s.bytes, 0) AS bytes, coalesce(s.send_ns, 0) AS send_ns, r.ela_ns AS reply_ns,
       coalesce(s.send_ns, 0) + r.ela_ns AS cost_ns
FROM reply r JOIN answered a USING (node, pid, file, line) LEFT JOIN sent s USING (node, pid, file, line);
