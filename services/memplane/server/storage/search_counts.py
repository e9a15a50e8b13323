"""Searches and memories added per workspace and UTC day (table search_counts, migration
0019; memories by their creation time)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from memplane.server.storage.database import Connection
from memplane.server.storage.routing import TenantDatabase

# One statement per (workspace, day) delta: it names its workspace, so it routes to the
# database holding it like every other statement (tests/e2e/test_workspace_scoping.py).
_ADD = """
INSERT INTO search_counts AS c (workspace_key, day, searches) VALUES (%(ws)s, %(day)s, %(n)s)
ON CONFLICT (workspace_key, day) DO UPDATE SET searches = c.searches + EXCLUDED.searches
"""

_SEARCHES = """
SELECT day, searches FROM search_counts WHERE workspace_key = %(ws)s AND day >= %(start)s AND day <= %(end)s
"""

# Through memories_created_idx (workspace_key, created_at DESC, id DESC): the range's rows only.
_ADDED = """
SELECT (created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS added FROM memories
WHERE workspace_key = %(ws)s AND created_at >= (%(start)s::date)::timestamp AT TIME ZONE 'UTC'
  AND created_at < ((%(end)s::date + 1)::timestamp AT TIME ZONE 'UTC')
GROUP BY 1
"""


@dataclass(frozen=True)
class DailyCounts:
    """One UTC day of a workspace: memories added (still stored) and searches counted."""

    day: date
    memories_added: int
    searches: int


async def add_searches(db: TenantDatabase, workspace_key: int, day: date, searches: int) -> None:
    """Add *searches* to the workspace's count of *day* (UTC), in a transaction of its own.
    Database errors propagate (`UnavailableError` when no database answers)."""
    async with db.tenant(workspace_key, lock_timeout_ms=1_000) as conn:  # a held lock: retried at the next flush
        await conn.execute(_ADD, {"ws": workspace_key, "day": day, "n": searches})


async def daily_counts(conn: Connection, workspace_key: int, start: date, end: date) -> list[DailyCounts]:
    """Each UTC day from *start* to *end* (both included), oldest first, with the memories
    created that day that are still stored (superseded and expired included; deleted ones
    are gone) and the searches counted (0 for a day without any)."""
    params = {"ws": workspace_key, "start": start, "end": end}
    searches = {r["day"]: int(r["searches"]) for r in await (await conn.execute(_SEARCHES, params)).fetchall()}
    added = {r["day"]: int(r["added"]) for r in await (await conn.execute(_ADDED, params)).fetchall()}
    days = [date.fromordinal(n) for n in range(start.toordinal(), end.toordinal() + 1)]
    return [DailyCounts(d, added.get(d, 0), searches.get(d, 0)) for d in days]
