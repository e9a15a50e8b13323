"""Memory history (`memory_events`): what each write records, and reading it back.

Event ids count 1, 2, 3... per workspace, from the workspace's own sequence
(`memplane_event_ids`, migration 0014; until then `workspace_stats.last_event_id`,
migration 0008): they order a workspace's history as its writes took them and tell
nothing of other workspaces' activity, which one shared sequence did (the gap between two
of a tenant's ids was the number of everyone else's events in between). A sequence holds
no lock until commit, so writers of one workspace no longer wait for each other's
commits; a write that rolls back leaves a gap in its own workspace's ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from memplane.domain.models import EventKind, Memory, MemoryEvent, Scope
from memplane.server.storage.database import Connection
from memplane.server.storage.rows import memory_from_snapshot, snapshot

# One write's events in one statement; a workspace without its sequence gets NULL ids, a
# NOT NULL violation, never events silently dropped.
_RECORD = """
WITH c AS (SELECT memplane_event_ids(%(ws)s, %(n)s) AS ids)
INSERT INTO memory_events (workspace_key, id, memory_id, kind, before, after, actor, request_id,
    scope_user_id, scope_agent_id, scope_session_id, created_at)
SELECT %(ws)s, c.ids[e.ord], e.memory_id, e.kind, e.before::jsonb, e.after::jsonb, %(actor)s, %(request_id)s,
    e.user_id, e.agent_id, e.session_id, %(now)s
FROM unnest(%(memory_ids)s::uuid[], %(kinds)s::text[], %(befores)s::text[], %(afters)s::text[],
            %(user_ids)s::text[], %(agent_ids)s::text[], %(session_ids)s::text[])
     WITH ORDINALITY AS e(memory_id, kind, before, after, user_id, agent_id, session_id, ord)
LEFT JOIN c ON true
ORDER BY e.ord
"""

Event = tuple[str, EventKind, Memory | None, Memory | None, Scope]  # memory id, kind, before, after, scope


async def record_events(
    conn: Connection,
    workspace_key: int,
    events: Sequence[Event],
    *,
    actor: str,
    request_id: str,
    now: datetime,
) -> None:
    """Insert *events* in the caller's tenant transaction, numbered on from the
    workspace's sequence, in the order given. Raises `psycopg.errors.NotNullViolation`
    if the workspace has no sequence (a bug: every workspace is created with one)."""
    if not events:
        return
    await conn.execute(
        _RECORD,
        {
            "ws": workspace_key,
            "n": len(events),
            "memory_ids": [e[0] for e in events],
            "kinds": [e[1].value for e in events],
            "befores": [json.dumps(snapshot(e[2])) if e[2] is not None else None for e in events],
            "afters": [json.dumps(snapshot(e[3])) if e[3] is not None else None for e in events],
            "user_ids": [e[4].user_id for e in events],
            "agent_ids": [e[4].agent_id for e in events],
            "session_ids": [e[4].session_id for e in events],
            "actor": actor,
            "request_id": request_id,
            "now": now,
        },
    )


async def load_events(conn: Connection, workspace_key: int, memory_id: str) -> list[MemoryEvent]:
    """History of one memory, oldest first (empty if the workspace never had it)."""
    cur = await conn.execute(
        "SELECT * FROM memory_events WHERE workspace_key = %s AND memory_id = %s ORDER BY id",
        (workspace_key, memory_id),
    )
    return [
        MemoryEvent(
            id=r["id"],
            memory_id=str(r["memory_id"]),
            kind=EventKind(r["kind"]),
            before=memory_from_snapshot(r["before"]),
            after=memory_from_snapshot(r["after"]),
            actor=r["actor"],
            request_id=r["request_id"],
            created_at=r["created_at"],
            decision=r["decision"],
        )
        for r in await cur.fetchall()
    ]


async def annotate_latest_event(
    conn: Connection, workspace_key: int, memory_id: str, decision: dict[str, Any], *, at: datetime
) -> None:
    """Attach *decision* (the audit record of the LLM path) to the newest event of
    *memory_id* written at *at* by this transaction."""
    await conn.execute(
        "UPDATE memory_events SET decision = %s WHERE workspace_key = %s AND (workspace_key, id) = ("
        " SELECT workspace_key, max(id) FROM memory_events WHERE workspace_key = %s AND memory_id = %s"
        " AND created_at = %s GROUP BY workspace_key)",
        (Jsonb(decision), workspace_key, workspace_key, memory_id, at),
    )
