-- Lexical candidates through the GIN index for a search over a whole workspace.
--
-- Under row-level security a search's own conditions are evaluated after the policy's
-- (workspace_key = memplane_current_workspace()), and only a leakproof operator may run
-- as an index condition before it; the full-text match `@@` (ts_match_vq) is not
-- leakproof, so a tenant's `lexical @@ q` never used memories_lexical_idx: a search
-- without a narrowing filter scanned every row of the workspace (1.78 s at 1,000,000
-- memories; the scope filters of a per-user search compare text, leakproof, and use
-- their btrees). This function runs as its owner, which the policy does not bind (ENABLE,
-- not FORCE), and enforces the policy itself: *ws* must be the transaction's workspace.
--
-- At most *cap* memories (id, lexical, lexical_length: what BM25 reads) of workspace
-- *ws* that match *q*, in the bitmap's physical order, and pass the validity filter of a
-- search at *at* (memplane.storage.filters.compile_filter's, repeated): current versions
-- (valid_from <= at < valid_to) unless *superseded*, unexpired (expires_at > at) unless
-- *expired*. No rows when *ws* is not memplane_current_workspace() (or none is set).
-- enable_seqscan off: the match is read from the GIN index at any estimate (a sequential
-- scan stopped by the LIMIT reads the whole partition when the lexemes are rare).
CREATE FUNCTION memplane_lexical_candidates(
    ws bigint, q tsquery, at timestamptz, superseded boolean, expired boolean, cap integer
) RETURNS TABLE (id uuid, lexical tsvector, lexical_length integer)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, public
    SET enable_seqscan = off
    AS $$
        SELECT m.id, m.lexical, m.lexical_length FROM public.memories m
        WHERE m.workspace_key = ws AND ws = public.memplane_current_workspace() AND m.lexical @@ q
          AND (superseded OR ((m.valid_to IS NULL OR m.valid_to > at) AND m.valid_from <= at))
          AND (expired OR m.expires_at IS NULL OR m.expires_at > at)
        LIMIT cap
    $$;
REVOKE ALL ON FUNCTION memplane_lexical_candidates(bigint, tsquery, timestamptz, boolean, boolean, integer)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION memplane_lexical_candidates(bigint, tsquery, timestamptz, boolean, boolean, integer)
    TO memplane_tenant;

-- Keep the tsvector in the row, as 0006 did for the embedding. A memory with a 384-d
-- vector (1.5 KB, MAIN) passes the 2 KB toast threshold, and `lexical`, the widest column
-- still EXTENDED, was moved to the TOAST table: 57 % of the rows at 1M (a LoCoMo turn
-- each), so BM25 fetched each such candidate's tsvector through the toast index (~4
-- buffers more per candidate, ~5 ms at 2,000 candidates warm). MAIN keeps it inline
-- unless a row outgrows a page. Recurses to every partition; rows written before keep
-- their storage until rewritten (VACUUM FULL).
ALTER TABLE memories ALTER COLUMN lexical SET STORAGE MAIN;
