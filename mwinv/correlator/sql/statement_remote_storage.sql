-- statement_remote_storage: per statement its sleeps that a FUSE file system (a tablespace on sshfs or
-- GlusterFS, docs/storage.md) may answer: those whose kernel stack passes through FUSE itself
-- (request_wait_answer for an open or a getattr), and the page cache's read waits (folio_wait_bit_common
-- under filemap_read: FUSE's read path reaches the page cache through tail calls, so its stacks show no
-- FUSE frame and look like a local disk's). Which node's page-cache waits are remote is the manifest's
-- to say (its storage record): storage.attribute counts them there as remote storage, not local disk.
--
-- builds:  statement_remote_storage
-- inputs:  seg_off_stack, stack_frame, statement_clean
-- columns: node, statement_id, query_id, fuse_ns, fuse_sleeps, page_wait_ns, page_sleeps
CREATE TABLE statement_remote_storage AS
WITH w AS (
    SELECT g.node, g.statement_id, g.ns, g.segments,
           len(list_filter(f.frames, x -> regexp_matches(x, '^(fuse_|__fuse_|request_wait_answer)'))) > 0 AS fuse,
           len(list_filter(f.frames, x -> regexp_matches(x, '^(filemap_get_pages|filemap_read|filemap_fault)'))) > 0
               AS page
    FROM seg_off_stack g JOIN stack_frame f USING (node, stack_id))
SELECT w.node, w.statement_id, s.query_id,
       coalesce(sum(w.ns) FILTER (WHERE w.fuse), 0)::BIGINT AS fuse_ns,
       coalesce(sum(w.segments) FILTER (WHERE w.fuse), 0)::BIGINT AS fuse_sleeps,
       coalesce(sum(w.ns) FILTER (WHERE w.page AND NOT w.fuse), 0)::BIGINT AS page_wait_ns,
       coalesce(sum(w.segments) FILTER (WHERE w.page AND NOT w.fuse), 0)::BIGINT AS page_sleeps
FROM w JOIN statement_clean s USING (node, statement_id)
GROUP BY ALL
HAVING fuse_ns > 0 OR page_wait_ns > 0;
