-- The HNSW graph insert leaves the write path (issue 31, item 3). A one-memory add spent
-- about half of PostgreSQL's time on it, and more as the workspace grew (pgvector walks a
-- larger graph for each insert: bench/ingest_growth.py, 1.8 -> 2.3 ms of backend CPU per
-- add over LoCoMo's ten conversations, 1.0 ms flat without the index). A memory is now
-- stored with vector_indexed = false; each workspace's HNSW index is partial (WHERE
-- vector_indexed), so the insert adds nothing to the graph; the server's vector indexer
-- (memplane.server.storage.vector_index) sets the flag in batches moments later, and that
-- UPDATE is what enters the graph. Until then the memory is found by the exact leg of a
-- search over the workspace's not-yet-indexed rows (memplane.server.storage.search), so a
-- search sees every committed memory as before.
--
-- Rows stored before this migration are in the graph already: the column's first default
-- marks them indexed (PostgreSQL keeps a constant default in the catalog: no rewrite), and
-- the default for new rows is false from here on.
ALTER TABLE memories ADD COLUMN vector_indexed boolean NOT NULL DEFAULT true;
ALTER TABLE memories ALTER COLUMN vector_indexed SET DEFAULT false;

-- The backlog: what the indexer has still to do, and what a search scans exactly.
CREATE INDEX memories_vector_backlog_idx ON memories (workspace_key, created_at) WHERE NOT vector_indexed;

-- Each workspace's HNSW index becomes partial in migration 0021, a transaction of its own:
-- this one holds every memories partition ACCESS EXCLUSIVE (ADD COLUMN) until it commits,
-- so it does only what is quick. Until 0021 the full index serves the graph leg as well.

-- Which writes wait for the indexer: memplane_insert_memories gets p_in_graph, the new
-- rows' vector_indexed. The server passes false for a call of few memories (the latency
-- of one add is what the deferral is for) and true for a large batch, or while the
-- workspace's backlog is long (memplane.server.storage.vector_index.VectorIndexer.defers):
-- a bulk load then pays its graph inserts inline, as before, instead of leaving the
-- indexer a backlog it would reach only by rewriting every row (an UPDATE of the flag is
-- a new row version and an entry in each index). Otherwise the function of migration
-- 0014, unchanged.
DROP FUNCTION memplane_insert_memories(bigint, text, text, bytea, jsonb, uuid[], text[], text[], text[], text[],
    text[], text[], text[], jsonb[], vector[], text[], int[], timestamptz[], timestamptz[], timestamptz[], text[],
    text[], text[], text, text, timestamptz, boolean);

CREATE OR REPLACE FUNCTION memplane_insert_memories(
    p_ws bigint, p_claim_id text, p_method text, p_digest bytea, p_result jsonb,
    p_ids uuid[], p_user_ids text[], p_agent_ids text[], p_session_ids text[], p_types text[], p_names text[],
    p_descriptions text[], p_contents text[], p_metadata jsonb[], p_embeddings vector[], p_lexical_texts text[],
    p_content_bytes int[], p_valid_froms timestamptz[], p_valid_tos timestamptz[], p_expires timestamptz[],
    p_source_sessions text[], p_source_messages text[], p_afters text[],
    p_actor text, p_request_id text, p_now timestamptz, p_dedupe boolean, p_in_graph boolean,
    OUT claimed boolean, OUT duplicate_ords bigint[], OUT duplicate_ids uuid[])
    LANGUAGE plpgsql
    AS $$
DECLARE
    stored uuid[];  -- the ids actually inserted
    added bigint;
    added_bytes bigint;
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
        SELECT r.*, to_tsvector('english', r.lexical_text) AS lexical,
            CASE WHEN p_dedupe AND NOT (r.type = 'episodic' AND r.metadata ? 'message_id')
                 THEN memplane_content_key(r.content) END AS content_key
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
            source_session_id, source_message_ids, version, created_at, updated_at, content_key, vector_indexed)
        SELECT p_ws, n.id, n.user_id, n.agent_id, n.session_id, n.type, n.name, n.description, n.content,
            n.metadata, n.embedding, n.lexical,
            (SELECT coalesce(sum(cardinality(u.positions)), 0) FROM unnest(n.lexical) u), n.content_bytes,
            n.valid_from, n.valid_to, n.expires_at, n.source_session_id,
            ARRAY(SELECT jsonb_array_elements_text(n.source_message_ids::jsonb)), 1, p_now, p_now,
            CASE WHEN n.valid_to IS NULL THEN n.content_key END, p_in_graph
        FROM new n ORDER BY n.content_key, n.ord
        ON CONFLICT (workspace_key, user_id, agent_id, session_id, content_key)
            WHERE content_key IS NOT NULL AND valid_to IS NULL DO NOTHING
        RETURNING id, lexical, lexical_length, content_bytes),
    df AS (
        INSERT INTO lexeme_df (workspace_key, lexeme, shard, df)
        SELECT p_ws, u.lexeme, mod(pg_backend_pid(), 8), count(*)
        FROM ins CROSS JOIN LATERAL unnest(ins.lexical) u
        GROUP BY u.lexeme ORDER BY u.lexeme
        ON CONFLICT (workspace_key, lexeme, shard) DO UPDATE SET df = lexeme_df.df + EXCLUDED.df
        RETURNING 1),
    pick AS (
        SELECT coalesce(
            (SELECT c.shard FROM workspace_counters c
             WHERE c.workspace_key = p_ws AND (SELECT count(*) FROM df) >= 0 AND EXISTS (SELECT FROM ins)
             ORDER BY c.shard = memplane_counter_shard() DESC, c.shard LIMIT 1 FOR UPDATE SKIP LOCKED),
            memplane_counter_shard()) AS shard),
    st AS (
        UPDATE workspace_counters s SET memory_count = s.memory_count + d.n, content_bytes = s.content_bytes + d.bytes,
            lexical_length_sum = s.lexical_length_sum + d.len
        FROM (SELECT count(*) AS n, coalesce(sum(content_bytes), 0) AS bytes, coalesce(sum(lexical_length), 0) AS len
              FROM ins) d, pick
        WHERE s.workspace_key = p_ws AND s.shard = pick.shard AND d.n > 0
        RETURNING d.n AS added, d.bytes AS added_bytes),
    ids AS (SELECT memplane_event_ids(p_ws, (SELECT count(*)::integer FROM ins)) AS ids),
    ev AS (
        INSERT INTO memory_events (workspace_key, id, memory_id, kind, before, after, actor, request_id,
            scope_user_id, scope_agent_id, scope_session_id, created_at)
        SELECT p_ws, ids.ids[row_number() OVER (ORDER BY n.ord)], n.id, 'ADD', NULL, n.after::jsonb, p_actor,
            p_request_id, n.user_id, n.agent_id, n.session_id, p_now
        FROM new n JOIN ins ON ins.id = n.id LEFT JOIN ids ON true
        ORDER BY n.ord)
    SELECT (SELECT ok FROM go), st.added, st.added_bytes, ARRAY(SELECT id FROM ins)
    INTO claimed, added, added_bytes, stored
    FROM (SELECT) one LEFT JOIN st ON true;
    IF cardinality(stored) > 0 AND added IS NULL THEN  -- a workspace without its counter rows (a bug)
        RAISE EXCEPTION 'workspace % has no counter row for shard %', p_ws, memplane_counter_shard()
            USING ERRCODE = '23502';
    END IF;
    PERFORM memplane_check_workspace_quotas(p_ws, added, added_bytes);
    IF NOT claimed OR NOT p_dedupe OR cardinality(stored) = cardinality(p_ids) THEN
        RETURN;
    END IF;
    -- The rows skipped as duplicates, each answered by the current memory of its scope
    -- holding its key (committed by another add, or stored earlier by this one).
    WITH dup AS MATERIALIZED (
        SELECT r.ord, m.id AS existing_id, r.user_id, r.agent_id, r.session_id
        FROM unnest(p_ids, p_user_ids, p_agent_ids, p_session_ids, p_contents)
             WITH ORDINALITY AS r(id, user_id, agent_id, session_id, content, ord)
        JOIN memories m ON m.workspace_key = p_ws AND m.user_id = r.user_id AND m.agent_id = r.agent_id
            AND m.session_id = r.session_id AND m.content_key = memplane_content_key(r.content)
            AND m.valid_to IS NULL
        WHERE r.id <> ALL (stored)),
    ids AS (SELECT memplane_event_ids(p_ws, (SELECT count(*)::integer FROM dup)) AS ids),
    ev AS (
        INSERT INTO memory_events (workspace_key, id, memory_id, kind, before, after, actor, request_id,
            scope_user_id, scope_agent_id, scope_session_id, created_at, decision)
        SELECT p_ws, ids.ids[row_number() OVER (ORDER BY d.ord)], d.existing_id, 'NOOP', NULL, NULL, p_actor,
            p_request_id, d.user_id, d.agent_id, d.session_id, p_now,
            jsonb_build_object('operation', 'NOOP', 'outcome', 'duplicate', 'method', 'normalised_content')
        FROM dup d LEFT JOIN ids ON true
        ORDER BY d.ord),
    rec AS (
        UPDATE idempotency_keys k SET result = k.result || jsonb_build_object(
            'ids', (SELECT jsonb_agg(coalesce(d.existing_id, r.id) ORDER BY r.ord)
                    FROM unnest(p_ids) WITH ORDINALITY AS r(id, ord) LEFT JOIN dup d ON d.ord = r.ord),
            'duplicates', (SELECT jsonb_agg(d.ord - 1 ORDER BY d.ord) FROM dup d))
        WHERE k.workspace_key = p_ws AND k.request_id = p_claim_id AND p_claim_id <> '')
    SELECT array_agg(d.ord ORDER BY d.ord), array_agg(d.existing_id ORDER BY d.ord)
    INTO duplicate_ords, duplicate_ids
    FROM dup d;
    IF coalesce(cardinality(duplicate_ords), 0) + cardinality(stored) <> cardinality(p_ids) THEN
        -- The memory that won the race was closed or deleted before this statement saw it:
        -- nothing of this call is kept; the caller may retry.
        RAISE EXCEPTION 'a memory with the same content changed while this add ran; retry'
            USING ERRCODE = '40001';
    END IF;
END
$$;
