-- statement_remote_storage: per statement the time it slept on a FUSE file system (a tablespace on
-- sshfs or GlusterFS, docs/storage.md): sleeping stretches whose kernel stack passes through FUSE
-- (fuse_file_read_iter under the page cache's wait, request_wait_answer for a synchronous request).
-- The same waits on a local disk (folio_wait_bit_common <- filemap_get_pages <- filemap_read) carry no
-- FUSE frame: this is remote storage, to be split over the link, the serving daemons and the remote disk.
--
-- builds:  statement_remote_storage
-- inputs:  seg_off_stack, stack_frame, statement_clean
-- columns: node, statement_id, query_id, fuse_ns, fuse_sleeps, other_sleep_ns
CREATE TABLE statement_remote_storage AS
WITH w AS (
    SELECT g.node, g.statement_id, g.ns, g.segments,
           len(list_filter(f.frames, x -> regexp_matches(x, '^(fuse_|request_wait_answer)'))) > 0 AS fuse
    FROM seg_off_stack g JOIN stack_frame f USING (node, stack_id))
SELECT w.node, w.statement_id, s.query_id,
       coalesce(sum(w.ns) FILTER (WHERE w.fuse), 0)::BIGINT AS fuse_ns,
       coalesce(sum(w.segments) FILTER (WHERE w.fuse), 0)::BIGINT AS fuse_sleeps,
       coalesce(sum(w.ns) FILTER (WHERE NOT w.fuse), 0)::BIGINT AS other_sleep_ns
FROM w JOIN statement_clean s USING (node, statement_id)
GROUP BY ALL;
