-- block_request: one row per block request a task issued, timed where its completion is known. The
-- submitting task's block_bio_queue where the trace has it, else block_rq_issue (it can run in a
-- kworker). A request completes at the sector it was issued at: the first completion there after
-- the issue, unless the sector was issued again first (then it is the later one's; a bio merged
-- behind another has no completion of its own and stays untimed). Completions run in interrupts,
-- recorded without the pid filter.
--
-- builds:  block_request
-- inputs:  kernel_event (block_bio_queue or block_rq_issue, block_rq_complete)
-- columns: node, pid, dev, ino (NULL), sector, nr_bytes, rwbs, issue_ns, complete_ns
CREATE TABLE block_request AS
WITH source AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM kernel_event WHERE event = 'block_bio_queue')
                THEN 'block_bio_queue' ELSE 'block_rq_issue' END AS event),
issue AS (
    SELECT node, ts_ns, pid, dev, sector, nr_bytes, rwbs,
           lead(ts_ns) OVER (PARTITION BY node, dev, sector ORDER BY ts_ns) AS next_issue_ns
    FROM kernel_event WHERE event = (SELECT event FROM source) AND nr_bytes > 0),
done AS (SELECT node, ts_ns, dev, sector FROM kernel_event WHERE event = 'block_rq_complete')
SELECT i.node, i.pid, i.dev, NULL::BIGINT AS ino, i.sector, i.nr_bytes, i.rwbs, i.ts_ns AS issue_ns,
       CASE WHEN d.ts_ns < coalesce(i.next_issue_ns, d.ts_ns + 1) THEN d.ts_ns END AS complete_ns
FROM issue i ASOF LEFT JOIN done d ON d.node = i.node AND d.dev = i.dev AND d.sector = i.sector
     AND d.ts_ns >= i.ts_ns;
