-- A tenant transaction holds its workspace until it ends (issue 28, item 3).
--
-- memplane_enter_workspace (0008) checked that the workspace exists, but held nothing:
-- a write that had entered its workspace could then wait on the partitioned tables while
-- DeleteWorkspace's DDL (WorkspaceStore._ddl: every partitioned parent ACCESS EXCLUSIVE)
-- dropped the partitions and deleted the row, and ran after it — into no partition
-- (CheckViolation 23514 "no partition of relation"), a foreign key to the deleted row
-- (tool_result_blobs, 23503) or a dropped sequence: INTERNAL, logged at ERROR.
--
-- Now it first takes ACCESS SHARE on the parent `memories` (ONLY: not its partitions;
-- the lock every tenant statement on memories takes anyway, from the fast path), then
-- checks. The lock conflicts with the DDL's ACCESS EXCLUSIVE, so either the DDL is done
-- before the lock is granted — and the check, with a snapshot taken after it (VOLATILE:
-- each statement of the function takes its own in READ COMMITTED), finds the workspace
-- gone: MPW01, UNAUTHENTICATED — or the transaction holds the lock until it ends and the
-- DDL waits for it (its lock_timeout, 200 ms, then a retry). Allowed on a standby and in a
-- read-only transaction (ACCESS SHARE); the tenant role has SELECT on memories.
CREATE OR REPLACE FUNCTION memplane_enter_workspace(ws bigint) RETURNS text
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    LOCK TABLE ONLY memories IN ACCESS SHARE MODE;
    IF NOT EXISTS (SELECT 1 FROM workspaces WHERE key = ws) THEN
        RAISE EXCEPTION 'workspace % no longer exists', ws USING ERRCODE = 'MPW01';
    END IF;
    RETURN ws::text;
END
$$;
