-- Context compaction (ReMe's context tools): stored tool outputs, structured transcript
-- messages and each workspace's default token encoding.

-- Whole tool outputs cut by CompactToolResults (ReMe's tool_result/ folder), read back by
-- ReadToolResult until expires_at. Not partitioned by workspace, unlike the tables of
-- 0001: rows are short-lived (days) and deleted by expiry across every workspace at once
-- (BlobCleaner), which the expires_at index makes cheap on one table and which would
-- otherwise need one scan per partition. Workspace deletion removes them through the
-- foreign key (ON DELETE CASCADE, driven by the primary key's leading workspace_key).
CREATE TABLE tool_result_blobs (
    workspace_key bigint NOT NULL REFERENCES workspaces (key) ON DELETE CASCADE,
    id            uuid NOT NULL,
    session_id    text NOT NULL DEFAULT '',
    user_id       text NOT NULL DEFAULT '',
    agent_id      text NOT NULL DEFAULT '',
    tool_use_id   text NOT NULL DEFAULT '',
    tool_name     text NOT NULL DEFAULT '',
    content       text NOT NULL,
    byte_size     bigint NOT NULL CHECK (byte_size >= 0),      -- UTF-8 bytes of content
    line_count    bigint NOT NULL CHECK (line_count >= 0),     -- str.splitlines() count
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (workspace_key, id),
    CHECK (expires_at > created_at)
);
CREATE INDEX tool_result_blobs_expires_idx ON tool_result_blobs (expires_at);

-- Blobs are immutable: no UPDATE for tenants.
GRANT SELECT, INSERT, DELETE ON tool_result_blobs TO memplane_tenant;
ALTER TABLE tool_result_blobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tool_result_blobs TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());

-- Content blocks (text / tool_use / tool_result, see memplane.domain.context_json) of
-- messages recorded by the compaction service; NULL for plain-text messages written by
-- WriteConversation, whose `content` is the whole message. Added on the partitioned
-- parent, so every existing and future workspace partition gets it (PostgreSQL >= 11;
-- a nullable column without default rewrites nothing).
ALTER TABLE transcript_messages ADD COLUMN blocks jsonb;

-- The workspace's default token encoding (CompactionService requests with an empty
-- `encoding`); one of memplane.compaction.tokens.ENCODINGS.
ALTER TABLE workspaces ADD COLUMN token_encoding text NOT NULL DEFAULT 'o200k_base';
