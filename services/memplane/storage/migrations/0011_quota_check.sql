-- Memory-count and byte quotas checked by the statement that changes the stats row
-- (memplane.storage.inserts, memplane.storage.memories' update), not by Python after a
-- fetch: an insert, its events and its COMMIT then reach the server in one round trip,
-- and the workspace's stats row (its event counter: every write of the workspace waits
-- for it) stays locked for database work only, not for a round trip through a busy
-- event loop. Measured (bench/ingest_sql.py, 8 callers of one workspace): 96 one-memory
-- AddMemories/s with the check in Python between the statement and COMMIT.
--
-- Called with the stats row after the write and the workspace's quotas as stored now;
-- returns true, or raises SQLSTATE MPQ01 whose DETAIL is JSON {"subject", "quota_id",
-- "limit"} (memplane.storage.database turns it into QuotaExceededError). A write that
-- adds nothing (or frees bytes) is never refused, so lowering a quota deletes nothing and
-- blocks no erasure. NULL arguments (no row written) pass.
CREATE FUNCTION memplane_check_quotas(workspace_name text, memory_count bigint, max_memories bigint, added bigint,
                                      content_bytes bigint, max_bytes bigint, added_bytes bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF max_memories > 0 AND added > 0 AND memory_count > max_memories THEN
        RAISE EXCEPTION 'max_memories: storing % more would pass the quota of % memories', added, max_memories
            USING ERRCODE = 'MPQ01', DETAIL = json_build_object(
                'subject', 'workspace:' || workspace_name, 'quota_id', 'max_memories', 'limit', max_memories)::text;
    END IF;
    IF max_bytes > 0 AND added_bytes > 0 AND content_bytes > max_bytes THEN
        RAISE EXCEPTION 'max_bytes: % more bytes of memory text would pass the quota of % bytes', added_bytes, max_bytes
            USING ERRCODE = 'MPQ01', DETAIL = json_build_object(
                'subject', 'workspace:' || workspace_name, 'quota_id', 'max_bytes', 'limit', max_bytes)::text;
    END IF;
    RETURN true;
END
$$;
GRANT EXECUTE ON FUNCTION memplane_check_quotas(text, bigint, bigint, bigint, bigint, bigint, bigint) TO memplane_tenant;
