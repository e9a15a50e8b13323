"""The retention sweep: erase memories past their `expires_at`, in every workspace.

Reads already hide expired memories (`compile_filter`; `include_expired` shows them);
the sweep reclaims their rows and their text once `retention.grace_seconds` have passed.
An expired memory is erased as `DeleteMemoriesByScope` erases: the row goes, the
before/after of its past events are redacted, and one content-free DELETE event (actor
"retention") records the decision, numbered from the workspace's own event sequence; the
workspace's counters (the sweep's shard) follow in the same statement; so do the BM25 document frequencies
(`lexeme_df`).
"""

from __future__ import annotations

from datetime import datetime

from psycopg import sql

from memplane.server.storage.database import Database
from memplane.server.storage.lexemes import removal_cte

RETENTION_ACTOR = "retention"

# One statement per batch: all data-modifying CTEs see one snapshot and commit together.
# SWEEP_MARKER names it in pg_stat_activity (an operator, or a test, tells it from requests).
SWEEP_MARKER = "memplane: retention sweep"
_SWEEP = """/* memplane: retention sweep */
WITH doomed AS (
    SELECT workspace_key, id FROM memories
    WHERE expires_at IS NOT NULL AND expires_at <= %(now)s
    LIMIT %(batch)s FOR UPDATE SKIP LOCKED),
d AS (
    DELETE FROM memories m USING doomed x WHERE m.workspace_key = x.workspace_key AND m.id = x.id
    RETURNING m.workspace_key, m.id, m.user_id, m.agent_id, m.session_id, m.content_bytes, m.lexical_length,
      m.lexical),
lexemes AS ({removal}),
g AS MATERIALIZED (
    SELECT workspace_key, count(*) AS n, sum(content_bytes) AS bytes, sum(lexical_length) AS len
    FROM d GROUP BY workspace_key),
counters AS (
    UPDATE workspace_counters s SET memory_count = s.memory_count - g.n, content_bytes = s.content_bytes - g.bytes,
        lexical_length_sum = s.lexical_length_sum - g.len
    FROM g WHERE s.workspace_key = g.workspace_key AND s.shard = memplane_counter_shard()),
ids AS (SELECT workspace_key, memplane_event_ids(workspace_key, n::integer) AS ids FROM g),
redacted AS (
    UPDATE memory_events e SET before = NULL, after = NULL
    FROM d WHERE e.workspace_key = d.workspace_key AND e.memory_id = d.id)
INSERT INTO memory_events (workspace_key, id, memory_id, kind, actor, scope_user_id, scope_agent_id,
    scope_session_id, created_at)
SELECT x.workspace_key, x.ids[x.ord], x.id, 'DELETE', %(actor)s, x.user_id, x.agent_id, x.session_id, %(now)s
FROM (SELECT d.*, ids.ids, row_number() OVER (PARTITION BY d.workspace_key ORDER BY d.id) AS ord
      FROM d LEFT JOIN ids ON ids.workspace_key = d.workspace_key) x
"""


async def delete_expired_memories(db: Database, *, now: datetime, batch_size: int = 500) -> int:
    """Erase every memory with `expires_at <= now`, *batch_size* per admin transaction
    (short locks, bounded WAL per commit); return how many. Rows locked by a concurrent
    sweep (another replica) or writer are skipped, not waited for. Raises `ValueError`
    for a batch size < 1; database errors propagate."""
    return await db.delete_in_batches(
        sql.SQL(_SWEEP).format(removal=removal_cte("d")), {"now": now, "actor": RETENTION_ACTOR}, batch_size=batch_size
    )
