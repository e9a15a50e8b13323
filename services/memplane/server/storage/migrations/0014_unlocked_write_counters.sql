-- No row every write of a workspace locks until its commit. Until now each write updated
-- the workspace's one `workspace_stats` row (quota counters, BM25's length sum, the event
-- counter of migration 0008) and held its lock through the commit's WAL flush: at 8
-- callers of one workspace (bench/ingest_sql.py, pg_stat_activity sampled) 531 of ~1,200
-- backend samples waited on that row. Now:
--
-- 1. The counters are sharded: `workspace_counters` holds COUNTER_SHARDS (8) rows per
--    workspace; an insert adds its deltas to a row no other write holds (see
--    memplane_insert_memories below), updates and deletes to the row of their backend
--    (memplane_counter_shard(): pid mod 8, as lexeme_df's shards), so writers on
--    different connections lock different rows. A shard's values may go negative (a
--    memory inserted through one shard and deleted through another); their sums are the
--    totals. `workspace_stats` becomes a view of those sums (same columns as the table
--    it replaces), so every reader is unchanged.
-- 2. Event ids come from a sequence per workspace, `memory_events_w<key>_id_seq`, created
--    and dropped with the workspace (memplane.storage.workspaces): nextval holds no lock
--    until commit. Ids still start at 1 per workspace and never move with another
--    workspace's writes; they increase in the order writes take them, and a write that
--    rolls back (a quota refusal, an error) leaves a gap in its own workspace's ids.
-- 3. Quotas are checked after the write's own shard is updated, over the shards' sums,
--    still exactly: see memplane_check_workspace_quotas (writes of a workspace with a
--    count or byte quota queue on its quota lock; the others do not).
-- 4. Read-your-writes tokens (memplane.api.read_tokens) keep their promise — a token
--    with counter c is cut after every event up to c has committed — by waiting for the
--    writers still holding ids up to c: see memplane_settled_event_counter.

-- The shard of this backend's counter rows (stable for a session).
CREATE FUNCTION memplane_counter_shard() RETURNS integer
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT mod(pg_backend_pid(), 8) $$;
GRANT EXECUTE ON FUNCTION memplane_counter_shard() TO memplane_tenant;

CREATE TABLE workspace_counters (
    workspace_key       bigint NOT NULL REFERENCES workspaces (key) ON DELETE CASCADE,
    shard               smallint NOT NULL CHECK (shard >= 0 AND shard < 8),
    memory_count        bigint NOT NULL DEFAULT 0,
    content_bytes       bigint NOT NULL DEFAULT 0,
    lexical_length_sum  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_key, shard)
);
ALTER TABLE workspace_counters ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON workspace_counters TO memplane_tenant
    USING (workspace_key = memplane_current_workspace());
GRANT SELECT, UPDATE ON workspace_counters TO memplane_tenant;

-- Existing workspaces: their totals in shard 0, the other shards at zero; an event
-- sequence each, continuing from last_event_id.
INSERT INTO workspace_counters (workspace_key, shard, memory_count, content_bytes, lexical_length_sum)
SELECT s.workspace_key, g.shard,
       CASE WHEN g.shard = 0 THEN s.memory_count ELSE 0 END,
       CASE WHEN g.shard = 0 THEN s.content_bytes ELSE 0 END,
       CASE WHEN g.shard = 0 THEN s.lexical_length_sum ELSE 0 END
FROM workspace_stats s CROSS JOIN generate_series(0, 7) AS g(shard);

DO $$
DECLARE
    ws record;
BEGIN
    FOR ws IN SELECT workspace_key, last_event_id FROM workspace_stats LOOP
        EXECUTE format('CREATE SEQUENCE %I AS bigint MINVALUE 1', 'memory_events_w' || ws.workspace_key || '_id_seq');
        IF ws.last_event_id > 0 THEN
            PERFORM setval(format('%I', 'memory_events_w' || ws.workspace_key || '_id_seq')::regclass,
                           ws.last_event_id);
        END IF;
    END LOOP;
END
$$;

-- The workspace's last event id taken (0 before its first), as the owner: the tenant
-- role has no grant on the sequences. NULL for a workspace without a sequence, or when
-- the transaction is in another workspace (a tenant reads only its own).
CREATE FUNCTION memplane_event_counter(ws bigint) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, public
    AS $$
DECLARE
    seq regclass := to_regclass(format('public.%I', 'memory_events_w' || ws || '_id_seq'));
BEGIN
    IF seq IS NULL OR coalesce(public.memplane_current_workspace() <> ws, false) THEN
        RETURN NULL;
    END IF;
    RETURN coalesce(pg_sequence_last_value(seq), 0);
END
$$;
GRANT EXECUTE ON FUNCTION memplane_event_counter(bigint) TO memplane_tenant;

DROP TABLE workspace_stats;
CREATE VIEW workspace_stats WITH (security_invoker = true) AS
    SELECT c.workspace_key, sum(c.memory_count)::bigint AS memory_count, sum(c.content_bytes)::bigint AS content_bytes,
           sum(c.lexical_length_sum)::bigint AS lexical_length_sum, memplane_event_counter(c.workspace_key) AS last_event_id
    FROM workspace_counters c GROUP BY c.workspace_key;
GRANT SELECT ON workspace_stats TO memplane_tenant;

-- Writers hold an advisory lock in SHARED mode (writers never wait for each other) on
-- (workspace key, slot of their backend) from before they take event ids until their
-- transaction ends; a token's reader sweeps the slots in EXCLUSIVE mode, one at a time.
CREATE FUNCTION memplane_event_lock_key(ws bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT (ws % 2147483647)::integer $$;

-- *n* new event ids of workspace *ws*, increasing (an array: ids[1] for the first
-- event). NULL when the workspace has no sequence, so the event's NOT NULL id refuses
-- the write (no event silently dropped). Raises SQLSTATE 42501 when the transaction is
-- in another workspace.
CREATE FUNCTION memplane_event_ids(ws bigint, n integer) RETURNS bigint[]
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, public
    AS $$
DECLARE
    seq regclass;
    ids bigint[];
BEGIN
    IF coalesce(public.memplane_current_workspace() <> ws, false) THEN
        RAISE EXCEPTION 'event ids of workspace % requested from another workspace', ws USING ERRCODE = '42501';
    END IF;
    seq := to_regclass(format('public.%I', 'memory_events_w' || ws || '_id_seq'));
    IF seq IS NULL OR n < 1 THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(public.memplane_event_lock_key(ws), mod(pg_backend_pid(), 64));
    IF n = 1 THEN
        RETURN ARRAY[nextval(seq)];
    END IF;
    SELECT array_agg(nextval(seq) ORDER BY g) INTO ids FROM generate_series(1, n) g;
    RETURN ids;
END
$$;
REVOKE ALL ON FUNCTION memplane_event_ids(bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memplane_event_ids(bigint, integer) TO memplane_tenant;

-- For a read-your-writes token (memplane.storage.database.Database.write_position): the
-- workspace's event counter c and then the WAL position, after every writer that took
-- an id up to c has ended. A writer takes its slot lock before its ids, so any id <= c
-- belongs to a writer that held its slot when c was read; taking each slot exclusively
-- waits for exactly those (and for any newer writer of the same slot). Each slot is taken
-- in a subtransaction that is then rolled back, which releases it at once (and a
-- cancelled sweep holds nothing). The position is read after that: a standby that has
-- replayed it shows every event <= c. Writers queue behind the sweep only while it holds
-- their slot.
CREATE FUNCTION memplane_settled_event_counter(ws bigint, OUT counter bigint, OUT lsn pg_lsn)
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    k integer := memplane_event_lock_key(ws);
BEGIN
    counter := coalesce(memplane_event_counter(ws), 0);
    FOR s IN 0..63 LOOP
        BEGIN
            PERFORM pg_advisory_xact_lock(k, s);
            RAISE EXCEPTION USING ERRCODE = 'MPS01';  -- roll the subtransaction back: the slot is free again
        EXCEPTION WHEN SQLSTATE 'MPS01' THEN
            NULL;
        END;
    END LOOP;
    lsn := pg_current_wal_lsn();
END
$$;
REVOKE ALL ON FUNCTION memplane_settled_event_counter(bigint) FROM PUBLIC;

-- Quotas of workspace *ws* for a write that added *added* memories and *added_bytes*
-- bytes of text, checked against the sums of its counter shards (call it after updating
-- the write's own shard). True, or SQLSTATE MPQ01 from memplane_check_quotas. A write
-- that adds nothing is never refused; a workspace without a count or byte quota is not
-- summed and waits for nobody.
--
-- Exact under concurrent writers, as with one row per workspace: a write of a workspace
-- with a quota first takes the workspace's quota lock (advisory, key (workspace, 64):
-- outside the token slots 0..63), held to its commit, and sums the shards in a statement
-- after it (this VOLATILE function's own, a fresh snapshot), so it sees every write
-- checked before it. Only such workspaces' writes queue there; the others' do not.
CREATE FUNCTION memplane_check_workspace_quotas(ws bigint, added bigint, added_bytes bigint) RETURNS boolean
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
    SELECT sum(memory_count)::bigint AS memory_count, sum(content_bytes)::bigint AS content_bytes INTO total
    FROM workspace_counters WHERE workspace_key = ws;
    RETURN memplane_check_quotas(w.name, total.memory_count, w.max_memories, added, total.content_bytes,
                                 w.max_bytes, added_bytes);
END
$$;
GRANT EXECUTE ON FUNCTION memplane_check_workspace_quotas(bigint, bigint, bigint) TO memplane_tenant;

-- memplane_insert_memories (migration 0013's, with its duplicate detection) on the new
-- counters: the same statements, their event ids from the workspace's sequence and the
-- deltas to a counter shard no other write holds (this backend's if free, else the first
-- free one: FOR UPDATE SKIP LOCKED; all held, it waits for its own) — with pid mod 8
-- alone, a server's pool of up to 16 connections put two writers on one row (sampled at
-- 8 callers: 108 waits on workspace_counters in 1,186 samples); the quotas in a statement
-- of their own, after the shard's row is held. The lexeme counters are locked before the
-- shard, as before. Same signature, so CREATE OR REPLACE keeps its grants.
CREATE OR REPLACE FUNCTION memplane_insert_memories(
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
            source_session_id, source_message_ids, version, created_at, updated_at, content_key)
        SELECT p_ws, n.id, n.user_id, n.agent_id, n.session_id, n.type, n.name, n.description, n.content,
            n.metadata, n.embedding, n.lexical,
            (SELECT coalesce(sum(cardinality(u.positions)), 0) FROM unnest(n.lexical) u), n.content_bytes,
            n.valid_from, n.valid_to, n.expires_at, n.source_session_id,
            ARRAY(SELECT jsonb_array_elements_text(n.source_message_ids::jsonb)), 1, p_now, p_now,
            CASE WHEN n.valid_to IS NULL THEN n.content_key END
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
