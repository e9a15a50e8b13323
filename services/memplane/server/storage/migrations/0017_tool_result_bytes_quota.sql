-- Stored tool outputs count against the workspace's max_bytes quota (issue 28, item 5).
--
-- Until now only memory text counted (workspace_counters.content_bytes): ten 1.4 MB
-- CompactToolResults were stored under max_bytes = 2000. Now:
--
-- 1. `workspace_blob_bytes` holds the UTF-8 bytes of each workspace's tool_result_blobs
--    rows, kept by statement triggers on that table: an INSERT adds its rows' bytes and
--    checks the quotas in the same statement (SQLSTATE MPQ01 from memplane_check_quotas
--    aborts the insert and its transaction: nothing half-written); a DELETE — expiry
--    (BlobCleaner), erasure by scope, a deleted workspace's cascade — releases them. A
--    deduplicated put only extends an existing row's expiry: no bytes added.
--    One row per workspace, not sharded as workspace_counters are: blob writes of a
--    workspace are serialised anyway (memplane.server.storage.blobs takes its blob lock,
--    advisory key (workspace, 65), before anything else), and the lock order stays
--    acyclic: a blob write takes blob lock -> its tool_result_blobs rows -> this row ->
--    the quota lock (workspace, 64); memory writes take counter shards -> the quota lock
--    and only read this row; deletes take this row last. Nobody holding the quota lock
--    waits for a row.
-- 2. memplane_check_workspace_quotas sums memory text and blob bytes against max_bytes,
--    so a memory write is refused when the workspace's blobs fill the quota too.
-- 3. GetWorkspaceUsage reports the blob bytes (tool_result_bytes).

CREATE TABLE workspace_blob_bytes (
    workspace_key bigint PRIMARY KEY REFERENCES workspaces (key) ON DELETE CASCADE,
    bytes         bigint NOT NULL DEFAULT 0
);
ALTER TABLE workspace_blob_bytes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON workspace_blob_bytes TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());
GRANT SELECT, INSERT, UPDATE ON workspace_blob_bytes TO memplane_tenant;

INSERT INTO workspace_blob_bytes (workspace_key, bytes)
SELECT workspace_key, sum(byte_size)::bigint FROM tool_result_blobs GROUP BY workspace_key;

-- The message names both kinds of bytes (the arguments and the DETAIL are unchanged).
CREATE OR REPLACE FUNCTION memplane_check_quotas(workspace_name text, memory_count bigint, max_memories bigint,
                                                 added bigint, content_bytes bigint, max_bytes bigint,
                                                 added_bytes bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF max_memories > 0 AND added > 0 AND memory_count > max_memories THEN
        RAISE EXCEPTION 'max_memories: storing % more would pass the quota of % memories', added, max_memories
            USING ERRCODE = 'MPQ01', DETAIL = json_build_object(
                'subject', 'workspace:' || workspace_name, 'quota_id', 'max_memories', 'limit', max_memories)::text;
    END IF;
    IF max_bytes > 0 AND added_bytes > 0 AND content_bytes > max_bytes THEN
        RAISE EXCEPTION 'max_bytes: % more bytes would pass the quota of % bytes (memory text and stored tool '
                        'outputs: % with them)', added_bytes, max_bytes, content_bytes
            USING ERRCODE = 'MPQ01', DETAIL = json_build_object(
                'subject', 'workspace:' || workspace_name, 'quota_id', 'max_bytes', 'limit', max_bytes)::text;
    END IF;
    RETURN true;
END
$$;

-- 0014's function, with the workspace's blob bytes in the byte total.
CREATE OR REPLACE FUNCTION memplane_check_workspace_quotas(ws bigint, added bigint, added_bytes bigint) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    w record;
    total record;
BEGIN
    IF coalesce(added, 0) <= 0 AND coalesce(added_bytes, 0) <= 0 THEN
        RETURN true;
    END IF;
    SELECT name, max_memories, max_bytes INTO w FROM workspaces WHERE key = ws;
    IF NOT FOUND OR (w.max_memories <= 0 AND w.max_bytes <= 0) THEN
        RETURN true;
    END IF;
    PERFORM pg_advisory_xact_lock(memplane_event_lock_key(ws), 64);
    SELECT sum(memory_count)::bigint AS memory_count,
           sum(content_bytes)::bigint
             + coalesce((SELECT b.bytes FROM workspace_blob_bytes b WHERE b.workspace_key = ws), 0) AS bytes
    INTO total
    FROM workspace_counters WHERE workspace_key = ws;
    RETURN memplane_check_quotas(w.name, total.memory_count, w.max_memories, added, total.bytes,
                                 w.max_bytes, added_bytes);
END
$$;

CREATE FUNCTION memplane_count_blob_bytes_added() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT workspace_key, sum(byte_size)::bigint AS bytes FROM added GROUP BY workspace_key
             ORDER BY workspace_key LOOP
        INSERT INTO workspace_blob_bytes AS b (workspace_key, bytes) VALUES (r.workspace_key, r.bytes)
        ON CONFLICT (workspace_key) DO UPDATE SET bytes = b.bytes + excluded.bytes;
        PERFORM memplane_check_workspace_quotas(r.workspace_key, 0, r.bytes);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION memplane_count_blob_bytes_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT workspace_key, sum(byte_size)::bigint AS bytes FROM gone GROUP BY workspace_key
             ORDER BY workspace_key LOOP
        UPDATE workspace_blob_bytes SET bytes = bytes - r.bytes WHERE workspace_key = r.workspace_key;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER tool_result_blobs_bytes_added AFTER INSERT ON tool_result_blobs
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memplane_count_blob_bytes_added();
CREATE TRIGGER tool_result_blobs_bytes_deleted AFTER DELETE ON tool_result_blobs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION memplane_count_blob_bytes_deleted();
