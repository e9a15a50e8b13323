-- 1. Memory-count and byte quotas checked by the statement that changes the stats row
-- (memplane_insert_memories below, memplane.storage.memories' update), not by Python
-- after a fetch: no client round trip then sits between updating the workspace's stats
-- row (every write of the workspace waits for it) and COMMIT. Measured at 8 callers of
-- one workspace (bench/ingest_sql.py, pg_stat_activity sampled): with the check in
-- Python, 1,457 of 3,250 backend samples waited on that row and 1,284 were idle in
-- transaction, the holder's COMMIT waiting for the server's event loop.
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

-- 2. One call stores new memories (memplane.storage.inserts): it enters the workspace
-- (role memplane_tenant and memplane.workspace_key for the transaction, as
-- Database.tenant does; SQLSTATE MPW01 when the workspace is gone), then one statement
-- of data-modifying CTEs: the request's idempotency record (when p_claim_id is set; its
-- reply p_result is known beforehand), the rows, their BM25 document frequencies, the
-- stats row with the quotas checked, and the ADD events. Returns false, having written
-- nothing, when p_claim_id was already taken. Sent alone on an autocommit connection it
-- is its own transaction, which the server commits the moment it ends: no COMMIT round
-- trip, and the stats row (the workspace's event counter, which every write of the
-- workspace waits for) stays locked for database work only — in a client transaction it
-- stayed locked until the client's event loop got round to sending COMMIT.
--
-- Row locks in the order the separate statements took them — the idempotency key,
-- memories, lexeme counters (in lexeme order), the stats row, events — so concurrent
-- inserts and deletes never deadlock: `(SELECT count(*) FROM df) >= 0` makes the stats
-- update wait for the lexeme counters. ev's LEFT JOIN turns a missing stats row into a
-- NOT NULL violation on the event id, never events silently dropped. The statement is
-- planned as memplane_tenant (PL/pgSQL plans it after the role is set), so row-level
-- security applies as in every tenant transaction.
CREATE FUNCTION memplane_insert_memories(
    p_ws bigint, p_claim_id text, p_method text, p_digest bytea, p_result jsonb,
    p_ids uuid[], p_user_ids text[], p_agent_ids text[], p_session_ids text[], p_types text[], p_names text[],
    p_descriptions text[], p_contents text[], p_metadata jsonb[], p_embeddings vector[], p_lexical_texts text[],
    p_content_bytes int[], p_valid_froms timestamptz[], p_valid_tos timestamptz[], p_expires timestamptz[],
    p_source_sessions text[], p_source_messages text[], p_afters text[],
    p_actor text, p_request_id text, p_now timestamptz) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    claimed boolean;
    checked boolean;
BEGIN
    PERFORM set_config('role', 'memplane_tenant', true),
            set_config('memplane.workspace_key', memplane_enter_workspace(p_ws), true);
    WITH claim AS (
        INSERT INTO idempotency_keys (workspace_key, request_id, method, request_hash, result)
        SELECT p_ws, p_claim_id, p_method, p_digest, p_result WHERE p_claim_id <> ''
        ON CONFLICT DO NOTHING
        RETURNING 1),
    go AS (SELECT p_claim_id = '' OR EXISTS (SELECT FROM claim) AS ok),
    new AS MATERIALIZED (
        SELECT r.*, to_tsvector('english', r.lexical_text) AS lexical
        FROM unnest(p_ids, p_user_ids, p_agent_ids, p_session_ids,
                    p_types, p_names, p_descriptions, p_contents,
                    p_metadata, p_embeddings, p_lexical_texts,
                    p_content_bytes, p_valid_froms, p_valid_tos,
                    p_expires, p_source_sessions, p_source_messages,
                    p_afters)
             WITH ORDINALITY AS r(id, user_id, agent_id, session_id, type, name, description, content, metadata,
                                  embedding, lexical_text, content_bytes, valid_from, valid_to, expires_at,
                                  source_session_id, source_message_ids, after, ord)
        WHERE (SELECT ok FROM go)),
    ins AS (
        INSERT INTO memories (workspace_key, id, user_id, agent_id, session_id, type, name, description, content,
            metadata, embedding, lexical, lexical_length, content_bytes, valid_from, valid_to, expires_at,
            source_session_id, source_message_ids, version, created_at, updated_at)
        SELECT p_ws, n.id, n.user_id, n.agent_id, n.session_id, n.type, n.name, n.description, n.content,
            n.metadata, n.embedding, n.lexical,
            (SELECT coalesce(sum(cardinality(u.positions)), 0) FROM unnest(n.lexical) u), n.content_bytes,
            n.valid_from, n.valid_to, n.expires_at, n.source_session_id,
            ARRAY(SELECT jsonb_array_elements_text(n.source_message_ids::jsonb)), 1, p_now, p_now
        FROM new n ORDER BY n.ord
        RETURNING lexical, lexical_length, content_bytes),
    df AS (
        INSERT INTO lexeme_df (workspace_key, lexeme, shard, df)
        SELECT p_ws, u.lexeme, mod(pg_backend_pid(), 8), count(*)
        FROM ins CROSS JOIN LATERAL unnest(ins.lexical) u
        GROUP BY u.lexeme ORDER BY u.lexeme
        ON CONFLICT (workspace_key, lexeme, shard) DO UPDATE SET df = lexeme_df.df + EXCLUDED.df
        RETURNING 1),
    st AS (
        UPDATE workspace_stats s SET memory_count = s.memory_count + d.n, content_bytes = s.content_bytes + d.bytes,
            lexical_length_sum = s.lexical_length_sum + d.len, last_event_id = s.last_event_id + d.n
        FROM (SELECT count(*) AS n, coalesce(sum(content_bytes), 0) AS bytes, coalesce(sum(lexical_length), 0) AS len
              FROM ins) d, workspaces w
        WHERE s.workspace_key = p_ws AND w.key = s.workspace_key AND d.n > 0 AND (SELECT count(*) FROM df) >= 0
        RETURNING w.name, s.memory_count, w.max_memories, d.n AS added, s.content_bytes, w.max_bytes,
            d.bytes AS added_bytes, s.last_event_id - d.n AS base),
    ev AS (
        INSERT INTO memory_events (workspace_key, id, memory_id, kind, before, after, actor, request_id,
            scope_user_id, scope_agent_id, scope_session_id, created_at)
        SELECT p_ws, st.base + n.ord, n.id, 'ADD', NULL, n.after::jsonb, p_actor, p_request_id,
            n.user_id, n.agent_id, n.session_id, p_now
        FROM new n LEFT JOIN st ON true
        ORDER BY n.ord)
    SELECT (SELECT ok FROM go),
        memplane_check_quotas(st.name, st.memory_count, st.max_memories, st.added, st.content_bytes, st.max_bytes,
                              st.added_bytes)
    INTO claimed, checked
    FROM (SELECT) one LEFT JOIN st ON true;
    RETURN claimed;
END
$$;
