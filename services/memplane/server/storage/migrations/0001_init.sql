-- memplane schema v1: workspaces, keys, memories, history, transcripts, idempotency.
-- Tables holding tenant rows are LIST-partitioned by workspace_key; each workspace gets
-- its own partitions (created by WorkspaceStore.create), hence its own HNSW, GIN and
-- btree indexes, per-tenant size and cheap deletion (DROP TABLE).

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE workspaces (
    key                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                 text NOT NULL UNIQUE,
    embedding_model      text NOT NULL,
    embedding_dimensions integer NOT NULL CHECK (embedding_dimensions BETWEEN 1 AND 16000),
    max_memories         bigint NOT NULL DEFAULT 0 CHECK (max_memories >= 0),
    created_at           timestamptz NOT NULL DEFAULT now()
);

-- Running totals, updated in the same transaction as every write (quota checks, BM25's
-- average document length, usage) so that nothing counts rows on the hot path.
CREATE TABLE workspace_stats (
    workspace_key       bigint PRIMARY KEY REFERENCES workspaces (key) ON DELETE CASCADE,
    memory_count        bigint NOT NULL DEFAULT 0,
    content_bytes       bigint NOT NULL DEFAULT 0,
    lexical_length_sum  bigint NOT NULL DEFAULT 0
);

CREATE TABLE api_keys (
    key_id        text PRIMARY KEY,
    workspace_key bigint REFERENCES workspaces (key) ON DELETE CASCADE,  -- NULL: admin key
    secret_hash   bytea NOT NULL,
    display_name  text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);

CREATE TABLE memories (
    workspace_key      bigint NOT NULL,
    id                 uuid NOT NULL,
    user_id            text NOT NULL DEFAULT '',
    agent_id           text NOT NULL DEFAULT '',
    session_id         text NOT NULL DEFAULT '',
    type               text NOT NULL CHECK (type IN ('user', 'feedback', 'project', 'reference',
                                                     'procedural', 'tool', 'episodic')),
    name               text NOT NULL DEFAULT '',
    description        text NOT NULL DEFAULT '',
    content            text NOT NULL,
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb,
    embedding          vector NOT NULL,
    lexical            tsvector NOT NULL,
    lexical_length     integer NOT NULL,
    content_bytes      integer NOT NULL,
    valid_from         timestamptz NOT NULL,
    valid_to           timestamptz,
    expires_at         timestamptz,
    source_session_id  text NOT NULL DEFAULT '',
    source_message_ids text[] NOT NULL DEFAULT '{}',
    version            bigint NOT NULL DEFAULT 1,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    PRIMARY KEY (workspace_key, id),
    CHECK (valid_to IS NULL OR valid_to > valid_from)
) PARTITION BY LIST (workspace_key);

-- Scope columns get btrees so that a small scope is scanned exactly (recall 1.0)
-- instead of through HNSW, whose post-filtering returns too few rows (case C003).
CREATE INDEX memories_user_idx ON memories (workspace_key, user_id, created_at DESC);
CREATE INDEX memories_agent_idx ON memories (workspace_key, agent_id, created_at DESC);
CREATE INDEX memories_session_idx ON memories (workspace_key, session_id, created_at DESC);
CREATE INDEX memories_created_idx ON memories (workspace_key, created_at DESC, id DESC);
CREATE INDEX memories_lexical_idx ON memories USING gin (lexical);
CREATE INDEX memories_metadata_idx ON memories USING gin (metadata jsonb_path_ops);

-- A plain sequence, not an identity column: identity on partitioned tables needs PG 17.
CREATE SEQUENCE memory_events_id_seq AS bigint;
CREATE TABLE memory_events (
    workspace_key bigint NOT NULL,
    id            bigint NOT NULL DEFAULT nextval('memory_events_id_seq'),
    memory_id     uuid NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('ADD', 'UPDATE', 'DELETE', 'NOOP')),
    before        jsonb,
    after         jsonb,
    actor         text NOT NULL,
    request_id    text NOT NULL DEFAULT '',
    scope_user_id text NOT NULL DEFAULT '',
    scope_agent_id text NOT NULL DEFAULT '',
    scope_session_id text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_key, id)
) PARTITION BY LIST (workspace_key);
CREATE INDEX memory_events_memory_idx ON memory_events (workspace_key, memory_id, id);

CREATE TABLE transcript_messages (
    workspace_key bigint NOT NULL,
    session_id    text NOT NULL,
    seq           bigint NOT NULL,
    message_id    text NOT NULL,
    user_id       text NOT NULL DEFAULT '',
    agent_id      text NOT NULL DEFAULT '',
    role          text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    name          text NOT NULL DEFAULT '',
    content       text NOT NULL,
    created_at    timestamptz NOT NULL,
    compacted     boolean NOT NULL DEFAULT false,
    PRIMARY KEY (workspace_key, session_id, seq),
    UNIQUE (workspace_key, session_id, message_id)
) PARTITION BY LIST (workspace_key);

CREATE TABLE idempotency_keys (
    workspace_key bigint NOT NULL REFERENCES workspaces (key) ON DELETE CASCADE,
    request_id    text NOT NULL,
    method        text NOT NULL,
    request_hash  bytea NOT NULL,
    result        jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_key, request_id)
);

-- Second wall: tenant transactions run as memplane_tenant with memplane.workspace_key
-- set (Database.tenant); the policies below hide every other workspace's rows even if
-- a query forgot its WHERE clause. Privileges and policies of a partitioned table
-- govern access through it; the tenant role has no grant on the partitions themselves.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'memplane_tenant') THEN
        CREATE ROLE memplane_tenant NOLOGIN;
    END IF;
END
$$;
GRANT memplane_tenant TO CURRENT_USER;
GRANT USAGE ON SCHEMA public TO memplane_tenant;
GRANT SELECT ON workspaces TO memplane_tenant;
GRANT SELECT, UPDATE ON workspace_stats TO memplane_tenant;
GRANT SELECT, INSERT, UPDATE, DELETE ON memories, transcript_messages, idempotency_keys
    TO memplane_tenant;
GRANT SELECT, INSERT, UPDATE ON memory_events TO memplane_tenant;
GRANT USAGE ON SEQUENCE memory_events_id_seq TO memplane_tenant;

CREATE FUNCTION memplane_current_workspace() RETURNS bigint
    LANGUAGE sql STABLE
    AS $$ SELECT nullif(current_setting('memplane.workspace_key', true), '')::bigint $$;

ALTER TABLE workspace_stats ENABLE ROW LEVEL SECURITY;
ALTER TABLE memories ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE transcript_messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON workspace_stats TO memplane_tenant
    USING (workspace_key = memplane_current_workspace());
CREATE POLICY tenant_isolation ON memories TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());
CREATE POLICY tenant_isolation ON memory_events TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());
CREATE POLICY tenant_isolation ON transcript_messages TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());
CREATE POLICY tenant_isolation ON idempotency_keys TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());
-- The owner (admin path: workspace DDL, usage) is exempt: ENABLE, not FORCE.
