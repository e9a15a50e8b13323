-- Tenant isolation: event ids counted per workspace (no id moves with another tenant's
-- writes), credentials changes announced to every server process (LISTEN/NOTIFY), and
-- a tenant transaction of a deleted workspace refused by name.

-- 1. Per-workspace event ids. One sequence shared by every workspace let a tenant count
-- the others' writes from the gaps between its own ids. Each workspace now numbers its
-- events 1, 2, 3... from workspace_stats.last_event_id, advanced in the writing
-- transaction (memplane.storage.history): that row is already updated by every write,
-- so its row lock adds no serialisation that was not there.
ALTER TABLE workspace_stats ADD COLUMN last_event_id bigint NOT NULL DEFAULT 0 CHECK (last_event_id >= 0);
ALTER TABLE memory_events ALTER COLUMN id DROP DEFAULT;  -- recurses to every partition
DROP SEQUENCE memory_events_id_seq;

-- Backfill: renumber each workspace's events 1..n in their old order. Negated first, so
-- that no new id meets an old one still in place (the primary key is checked per row).
UPDATE memory_events SET id = -id;
UPDATE memory_events e SET id = r.n
FROM (SELECT workspace_key, id, row_number() OVER (PARTITION BY workspace_key ORDER BY id DESC) AS n
      FROM memory_events) r
WHERE e.workspace_key = r.workspace_key AND e.id = r.id;
UPDATE workspace_stats s SET last_event_id = m.n
FROM (SELECT workspace_key, max(id) AS n FROM memory_events GROUP BY workspace_key) m
WHERE s.workspace_key = m.workspace_key;

-- 2. Every change that can invalidate a cached credential is announced on channel
-- memplane_credentials, by trigger, so no code path can forget it; PostgreSQL delivers
-- a notification only when (and if) its transaction commits. Payload: JSON
-- {"key_id": ...} for a key revoked, re-secreted or deleted (a workspace's deletion
-- deletes its keys), {"workspace": name} for a workspace updated or deleted.
-- memplane.storage.invalidation listens on every server process.
CREATE FUNCTION memplane_notify_credentials() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_TABLE_NAME = 'api_keys' THEN
        PERFORM pg_notify('memplane_credentials', json_build_object('key_id', OLD.key_id)::text);
    ELSE
        PERFORM pg_notify('memplane_credentials', json_build_object('workspace', OLD.name)::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER api_keys_notify_credentials AFTER UPDATE OF revoked_at, secret_hash OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION memplane_notify_credentials();
CREATE TRIGGER workspaces_notify_credentials AFTER UPDATE OR DELETE ON workspaces
    FOR EACH ROW EXECUTE FUNCTION memplane_notify_credentials();

-- 3. A tenant transaction starts with memplane_enter_workspace(key) (Database.tenant):
-- the workspace key as text for memplane.workspace_key, or SQLSTATE MPW01 when the
-- workspace is gone, which the server answers UNAUTHENTICATED. A principal cached just
-- before its workspace was deleted then never reaches a dropped partition (which
-- answered INTERNAL: no stats row, no partition for the row).
CREATE FUNCTION memplane_enter_workspace(ws bigint) RETURNS text
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM workspaces WHERE key = ws) THEN
        RAISE EXCEPTION 'workspace % no longer exists', ws USING ERRCODE = 'MPW01';
    END IF;
    RETURN ws::text;
END
$$;
