-- Duplicates without an LLM (issue 11, item 4): AddMemories of a text whose normalised
-- form is already a current memory of the same scope (user_id, agent_id, session_id)
-- stores nothing; the reply names the stored memory and its history records a NOOP.
--
-- 1. The normalisation, in one place: memplane_content_key(content) is the SHA-256 of the
-- text after Unicode NFKC (fullwidth "ＡＢＣ" -> "ABC", ideographic and no-break spaces ->
-- " "), lower case (Unicode simple case mapping, independent of the server's libc: the
-- builtin pg_c_utf8 collation of PostgreSQL >= 17, else ICU's root locale, else the
-- database default), every run of whitespace made one space and the ends trimmed. CJK
-- text is unchanged by case and keeps its characters. The collation is fixed when this
-- migration runs, so every key of a database is computed the same way.
DO $$
DECLARE
    coll text := (SELECT quote_ident(collname) FROM pg_collation
                  WHERE collname IN ('pg_c_utf8', 'und-x-icu') AND collencoding IN (-1, 6)  -- 6: UTF8
                  ORDER BY collname = 'pg_c_utf8' DESC LIMIT 1);
BEGIN
    EXECUTE format($f$
        CREATE FUNCTION memplane_content_key(content text) RETURNS bytea
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            RETURN sha256(convert_to(btrim(regexp_replace(lower(normalize(content, NFKC) %s),
                '[\s\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+', ' ', 'g')), 'UTF8'))
        $f$, CASE WHEN coll IS NULL THEN '' ELSE 'COLLATE ' || coll END);
END
$$;
GRANT EXECUTE ON FUNCTION memplane_content_key(text) TO memplane_tenant;

-- 2. The key of a memory that answers duplicates (stored by AddMemories, SummarizeSession
-- or an extraction job's ADD); NULL for the rest: raw turns — episodic memories whose
-- metadata names a message_id, as WriteConversation and peer harnesses store them (the
-- same words said twice are two turns) — and a row whose content or validity an
-- update changed (memplane.storage.memories drops the key then). One current memory per key and scope;
-- a superseded (closed) memory no longer holds its key, so the fact can be added again.
ALTER TABLE memories ADD COLUMN content_key bytea;

-- Backfill: the oldest current memory of each duplicate group gets the key (the later
-- copies stay, unkeyed, as they were stored; later AddMemories of the text answer with
-- the oldest).
UPDATE memories m SET content_key = k.key
FROM (SELECT DISTINCT ON (workspace_key, user_id, agent_id, session_id, memplane_content_key(content))
             workspace_key, id, memplane_content_key(content) AS key
      FROM memories
      WHERE valid_to IS NULL AND NOT (type = 'episodic' AND metadata ? 'message_id')
      ORDER BY workspace_key, user_id, agent_id, session_id, memplane_content_key(content), created_at, id) k
WHERE m.workspace_key = k.workspace_key AND m.id = k.id;

-- On the partitioned table: every workspace partition gets its own (and new ones too).
CREATE UNIQUE INDEX memories_content_key_idx ON memories (workspace_key, user_id, agent_id, session_id, content_key)
    WHERE content_key IS NOT NULL AND valid_to IS NULL;

-- 3. memplane_insert_memories (migration 0011) again, with two changes marked "0013:"
--   * p_dedupe: when true (AddMemories, extraction ADDs), each row gets its content key and the
--     insert skips a row whose key is current in its scope (ON CONFLICT on the index
--     above: atomic with a concurrent add of the same text, which waits for the first
--     to commit); the rows are inserted in key order so that two batches holding the
--     same texts in another order wait on each other in one order, never in a cycle.
--     ADD events are numbered over the rows stored only.
--   * a second statement (its own snapshot, so it sees the row of a concurrent add that
--     won) finds the stored memory of each skipped row, records a NOOP event on it
--     (before and after NULL, decision {"operation": "NOOP", "outcome": "duplicate"})
--     and rewrites the request's idempotency record to name it: {"ids": [...],
--     "duplicates": [0-based positions]}.
-- Returns claimed (as before), and the 1-based positions of the skipped rows with the ids
-- of the memories that hold their text.
DROP FUNCTION memplane_insert_memories(bigint, text, text, bytea, jsonb, uuid[], text[], text[], text[], text[],
    text[], text[], text[], jsonb[], vector[], text[], int[], timestamptz[], timestamptz[], timestamptz[], text[],
    text[], text[], text, text, timestamptz);
CREATE FUNCTION memplane_insert_memories(
    p_ws bigint, p_claim_id text, p_method text, p_digest bytea, p_result jsonb,
    p_ids uuid[], p_user_ids text[], p_agent_ids text[], p_session_ids text[], p_types text[], p_names text[],
    p_descriptions text[], p_contents text[], p_metadata jsonb[], p_embeddings vector[], p_lexical_texts text[],
    p_content_bytes int[], p_valid_froms timestamptz[], p_valid_tos timestamptz[], p_expires timestamptz[],
    p_source_sessions text[], p_source_messages text[], p_afters text[],
    p_actor text, p_request_id text, p_now timestamptz, p_dedupe boolean,
    OUT claimed boolean, OUT duplicate_ords bigint[], OUT duplicate_ids uuid[])
    LANGUAGE plpgsql
    AS $$
DECLARE
    checked boolean;
    stored uuid[];  -- 0013: the ids actually inserted
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
            -- 0013: a raw turn (episodic, naming its message) is never a duplicate, as in the backfill
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
            source_session_id, source_message_ids, version, created_at, updated_at, content_key)
        SELECT p_ws, n.id, n.user_id, n.agent_id, n.session_id, n.type, n.name, n.description, n.content,
            n.metadata, n.embedding, n.lexical,
            (SELECT coalesce(sum(cardinality(u.positions)), 0) FROM unnest(n.lexical) u), n.content_bytes,
            n.valid_from, n.valid_to, n.expires_at, n.source_session_id,
            ARRAY(SELECT jsonb_array_elements_text(n.source_message_ids::jsonb)), 1, p_now, p_now,
            -- 0013: a row given a valid_to is closed at once and holds no key
            CASE WHEN n.valid_to IS NULL THEN n.content_key END
        FROM new n ORDER BY n.content_key, n.ord  -- 0013: key order (NULLs last), then request order
        ON CONFLICT (workspace_key, user_id, agent_id, session_id, content_key)
            WHERE content_key IS NOT NULL AND valid_to IS NULL DO NOTHING  -- 0013
        RETURNING id, lexical, lexical_length, content_bytes),
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
        -- 0013: events of the rows stored only, numbered in request order
        SELECT p_ws, st.base + row_number() OVER (ORDER BY n.ord), n.id, 'ADD', NULL, n.after::jsonb, p_actor,
            p_request_id, n.user_id, n.agent_id, n.session_id, p_now
        FROM new n JOIN ins ON ins.id = n.id LEFT JOIN st ON true
        ORDER BY n.ord)
    SELECT (SELECT ok FROM go),
        memplane_check_quotas(st.name, st.memory_count, st.max_memories, st.added, st.content_bytes, st.max_bytes,
                              st.added_bytes),
        ARRAY(SELECT id FROM ins)
    INTO claimed, checked, stored
    FROM (SELECT) one LEFT JOIN st ON true;
    IF NOT claimed OR NOT p_dedupe OR cardinality(stored) = cardinality(p_ids) THEN
        RETURN;
    END IF;
    -- 0013: the rows skipped as duplicates, each answered by the current memory of its
    -- scope holding its key (committed by another add, or stored earlier by this one).
    WITH dup AS MATERIALIZED (
        SELECT r.ord, m.id AS existing_id, r.user_id, r.agent_id, r.session_id
        FROM unnest(p_ids, p_user_ids, p_agent_ids, p_session_ids, p_contents)
             WITH ORDINALITY AS r(id, user_id, agent_id, session_id, content, ord)
        JOIN memories m ON m.workspace_key = p_ws AND m.user_id = r.user_id AND m.agent_id = r.agent_id
            AND m.session_id = r.session_id AND m.content_key = memplane_content_key(r.content)
            AND m.valid_to IS NULL
        WHERE r.id <> ALL (stored)),
    st AS (
        UPDATE workspace_stats s SET last_event_id = s.last_event_id + d.n
        FROM (SELECT count(*) AS n FROM dup) d
        WHERE s.workspace_key = p_ws AND d.n > 0
        RETURNING s.last_event_id - d.n AS base),
    ev AS (
        INSERT INTO memory_events (workspace_key, id, memory_id, kind, before, after, actor, request_id,
            scope_user_id, scope_agent_id, scope_session_id, created_at, decision)
        SELECT p_ws, st.base + row_number() OVER (ORDER BY d.ord), d.existing_id, 'NOOP', NULL, NULL, p_actor,
            p_request_id, d.user_id, d.agent_id, d.session_id, p_now,
            jsonb_build_object('operation', 'NOOP', 'outcome', 'duplicate', 'method', 'normalised_content')
        FROM dup d LEFT JOIN st ON true
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

-- 4. (Not about duplicates; this helper's one migration.) Each extraction job keeps the
-- failures of its attempts, shown by GetExtractionJob: [{"attempt", "error", "time"}],
-- oldest first, the latest 10 only, each error cut to 500 characters. Errors are the
-- reasons memplane writes ("LLM: timeout after 2.0 s", "worker lost: ..."), never memory
-- or message text. A lost attempt (its worker died; the lease passed and another claim
-- took the job over) is recorded by that claim. Jobs failed before this migration start
-- with their last error.
CREATE FUNCTION memplane_job_failure(history jsonb, attempt integer, error text) RETURNS jsonb
    LANGUAGE sql STABLE
    RETURN (SELECT coalesce(jsonb_agg(e.item ORDER BY e.n), '[]'::jsonb)
            FROM jsonb_array_elements(history || jsonb_build_array(jsonb_build_object(
                     'attempt', attempt, 'error', left(error, 500), 'time', now()))) WITH ORDINALITY AS e(item, n)
            WHERE e.n > jsonb_array_length(history) + 1 - 10);
ALTER TABLE extraction_jobs ADD COLUMN failed_attempts jsonb NOT NULL DEFAULT '[]'::jsonb;
UPDATE extraction_jobs SET failed_attempts = jsonb_build_array(jsonb_build_object(
        'attempt', attempts, 'error', left(error, 500), 'time', updated_at))
    WHERE error <> '';
