-- disk_request: one row per disk I/O a DBMS task caused, with its sequential flag and, where the
-- request's completion is known, its completion time. Reads are the task's page-cache adds
-- (page_read), unless it reads mostly past the page cache (O_DIRECT, as InnoDB does: an InnoDB
-- thread's one buffered read of a small file had hidden its 93 MB of direct reads); writes, and
-- those reads, are its block requests (block_request). A request is sequential when it starts within
-- seq_gap_sectors after the previous request of the same pid on the same file or device ends
-- ([Taufer]: sequential accesses show a stride of ~2 blocks).
--
-- builds:  disk_request
-- inputs:  page_read, block_request; the variable seq_gap_sectors (attribution.SEQ_GAP_SECTORS)
-- columns: block_request's, stride_sectors, sequential
CREATE TABLE disk_request AS
WITH cached AS (SELECT node, pid, sum(nr_bytes) AS bytes FROM page_read GROUP BY ALL),
direct AS (SELECT node, pid, sum(nr_bytes) AS bytes FROM block_request WHERE rwbs LIKE '%R%' GROUP BY ALL),
requests AS (
    SELECT * FROM page_read
    UNION ALL
    SELECT b.* FROM block_request b LEFT JOIN cached c USING (node, pid) LEFT JOIN direct d USING (node, pid)
    WHERE b.rwbs NOT LIKE '%R%' OR coalesce(c.bytes, 0) * 2 < d.bytes),
strided AS (
    SELECT *, sector - lag(sector + nr_bytes // 512) OVER w AS stride_sectors
    FROM requests WINDOW w AS (PARTITION BY node, pid, dev, ino ORDER BY issue_ns))
SELECT *, coalesce(abs(stride_sectors) <= getvariable('seq_gap_sectors'), false) AS sequential FROM strided;
