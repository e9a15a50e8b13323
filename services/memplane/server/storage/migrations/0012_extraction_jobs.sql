-- Extraction jobs (WriteConversation with extract): the LLM's work runs off the request
-- path, in workers of the write-back servers (memplane.writeback.jobs). One partition per
-- workspace, as memories, with the same row-level security.
--
-- Lifecycle: queued -> running (claimed with FOR UPDATE SKIP LOCKED; the worker holds a
-- lease until lease_until) -> done | failed; a failed attempt goes back to queued with
-- run_after later, until max attempts. A worker that dies leaves its job running with a
-- lease that expires; the next claim takes it over (attempts + 1). The memory changes of
-- a job and its move to done commit in one transaction, guarded by the attempt number,
-- so a job is applied once or not at all.
--
-- dedupe_key makes a conversation written twice one job: 'messages:<sha-256 of the
-- session id and its message ids>' (or 'request:<request_id>' for server-numbered
-- messages), memplane.storage.jobs.dedupe_key.
CREATE TABLE extraction_jobs (
    workspace_key bigint NOT NULL,
    id            uuid NOT NULL,
    dedupe_key    text NOT NULL,
    status        text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
    user_id       text NOT NULL DEFAULT '',
    agent_id      text NOT NULL DEFAULT '',
    session_id    text NOT NULL,
    message_ids   text[] NOT NULL,
    actor         text NOT NULL,
    request_id    text NOT NULL DEFAULT '',
    attempts      integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    lease_until   timestamptz,
    run_after     timestamptz NOT NULL DEFAULT now(),
    error         text NOT NULL DEFAULT '',
    result        jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_key, id),
    UNIQUE (workspace_key, dedupe_key)
) PARTITION BY LIST (workspace_key);
-- What a claim looks for; the finished jobs stay out of the index.
CREATE INDEX extraction_jobs_ready_idx ON extraction_jobs (run_after) WHERE status IN ('queued', 'running');

DO $$
DECLARE
    w record;
BEGIN
    FOR w IN SELECT key FROM workspaces ORDER BY key LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF extraction_jobs FOR VALUES IN (%s)',
                       'extraction_jobs_w' || w.key, w.key);
    END LOOP;
END
$$;

GRANT SELECT, INSERT, UPDATE ON extraction_jobs TO memplane_tenant;
ALTER TABLE extraction_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON extraction_jobs TO memplane_tenant
    USING (workspace_key = memplane_current_workspace())
    WITH CHECK (workspace_key = memplane_current_workspace());

-- Workers wait on channel memplane_extraction: a job queued (or queued again for a
-- retry) announces '<workspace_key>:<job id>', a job finished (done or failed) the same on
-- memplane_extraction_done, for WriteConversation(wait=true) and GetExtractionJob waiters
-- on any server. Delivered only when the transaction commits.
CREATE FUNCTION memplane_notify_extraction() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.status = 'queued' THEN
        PERFORM pg_notify('memplane_extraction', NEW.workspace_key || ':' || NEW.id);
    ELSIF NEW.status IN ('done', 'failed') THEN
        PERFORM pg_notify('memplane_extraction_done', NEW.workspace_key || ':' || NEW.id);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER extraction_jobs_notify AFTER INSERT OR UPDATE OF status, run_after ON extraction_jobs
    FOR EACH ROW EXECUTE FUNCTION memplane_notify_extraction();

-- Audit: the decision behind an event of the write-back LLM path (extraction and
-- reconciliation): {"operation", "model", "prompt_sha256", "input_memory_ids", "outcome",
-- "job_id"}. NULL for every other write.
ALTER TABLE memory_events ADD COLUMN decision jsonb;
