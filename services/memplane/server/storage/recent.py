"""The most recently updated memories of a filter: the order of the Markdown view's
MEMORY.md (`memplane.mdview.render`), and the files SelectMemoryFiles offers its LLM.
Runs on a connection from `Database.tenant(workspace.key)` (row-level security)."""

from __future__ import annotations

from datetime import datetime

from psycopg import sql

from memplane.domain.filters import MemoryFilter
from memplane.domain.models import Memory, Workspace
from memplane.server.storage.database import Connection, fetch_one
from memplane.server.storage.filters import Params, compile_filter
from memplane.server.storage.rows import MEMORY_COLUMNS, memory_from_row


async def recently_updated(
    conn: Connection, workspace: Workspace, flt: MemoryFilter, *, now: datetime, limit: int
) -> tuple[list[Memory], int]:
    """At most *limit* memories matching *flt* at *now*, most recently updated first
    (updated_at, then id, both descending), and how many match in all."""
    params = Params(ws=workspace.key, limit=limit)
    where = compile_filter(flt, params, now)
    cur = await conn.execute(
        sql.SQL(
            "SELECT {cols} FROM memories m WHERE m.workspace_key = %(ws)s AND {where}"
            " ORDER BY m.updated_at DESC, m.id DESC LIMIT %(limit)s"
        ).format(cols=sql.SQL(MEMORY_COLUMNS), where=where),
        params.values,
    )
    memories = [memory_from_row(r) for r in await cur.fetchall()]
    count_params = Params(ws=workspace.key)
    cur = await conn.execute(
        sql.SQL("SELECT count(*) AS n FROM memories m WHERE m.workspace_key = %(ws)s AND {}").format(
            compile_filter(flt, count_params, now)
        ),
        count_params.values,
    )
    return memories, int((await fetch_one(cur))["n"])
