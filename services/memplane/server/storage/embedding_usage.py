"""The daily embedding-token meter (table embedding_usage, migration 0005)."""

from __future__ import annotations

from datetime import date

from memplane.server.storage.routing import TenantDatabase

# One statement: the charge is made only if it keeps the day's total within the quota as
# stored now (0: unlimited), under the row lock ON CONFLICT takes, so concurrent charges
# never pass the quota together.
_CHARGE = """
INSERT INTO embedding_usage AS u (workspace_key, day, tokens)
SELECT %(ws)s, %(day)s, %(n)s FROM workspaces w
WHERE w.key = %(ws)s AND (w.max_embedding_tokens_per_day = 0 OR %(n)s <= w.max_embedding_tokens_per_day)
ON CONFLICT (workspace_key, day) DO UPDATE SET tokens = u.tokens + EXCLUDED.tokens
WHERE (SELECT w.max_embedding_tokens_per_day = 0 OR u.tokens + EXCLUDED.tokens <= w.max_embedding_tokens_per_day
       FROM workspaces w WHERE w.key = u.workspace_key)
RETURNING u.tokens
"""


async def charge_tokens(db: TenantDatabase, workspace_key: int, day: date, tokens: int) -> int | None:
    """Add *tokens* to the workspace's total of *day* (UTC) if the total stays within its
    `max_embedding_tokens_per_day`; return the new total, or None (nothing charged) when
    it would not. Database errors propagate."""
    async with db.tenant(workspace_key) as conn:
        cur = await conn.execute(_CHARGE, {"ws": workspace_key, "day": day, "n": tokens})
        row = await cur.fetchone()
    return None if row is None else int(row["tokens"])
