"""Maintenance of `lexeme_df` (migration 0006): the BM25 document frequencies of each
workspace, changed in the same transaction as the memories they count.

Each change is one `INSERT ... ON CONFLICT DO UPDATE SET df = df + delta` over the
lexemes it touches, in lexeme order (concurrent writers lock rows in one order: no
deadlock), into the shard of the writing backend (`mod(pg_backend_pid(), 8)`: writers on
different connections seldom share a row, so a common lexeme is no hot row on ingest).
"""

from __future__ import annotations

from typing import Any

from psycopg import sql

from memplane.server.storage.database import Connection

SHARDS = 8  # written into the statements below (and memplane.server.storage.inserts') as mod(pg_backend_pid(), 8)

# The difference between an old and a new tsvector of one memory (an update of its text).
_CHANGE = (
    "INSERT INTO lexeme_df (workspace_key, lexeme, shard, df)"
    " SELECT %(ws)s, x.lexeme, mod(pg_backend_pid(), 8), sum(x.delta)"
    " FROM (SELECT u.lexeme, 1 AS delta FROM unnest(%(new)s::tsvector) u"
    "       UNION ALL SELECT u.lexeme, -1 FROM unnest(%(old)s::tsvector) u) x"
    " GROUP BY x.lexeme HAVING sum(x.delta) <> 0 ORDER BY x.lexeme"
    " ON CONFLICT (workspace_key, lexeme, shard) DO UPDATE SET df = lexeme_df.df + EXCLUDED.df"
)


def removal_cte(deleted: str) -> sql.Composed:
    """A data-modifying CTE body subtracting the lexemes of the rows of CTE *deleted*
    (columns workspace_key, lexical), for a DELETE ... RETURNING in the same statement."""
    return sql.SQL(
        "INSERT INTO lexeme_df (workspace_key, lexeme, shard, df)"
        " SELECT {d}.workspace_key, u.lexeme, mod(pg_backend_pid(), 8), -count(*)"
        " FROM {d} CROSS JOIN LATERAL unnest({d}.lexical) u"
        " GROUP BY {d}.workspace_key, u.lexeme ORDER BY {d}.workspace_key, u.lexeme"
        " ON CONFLICT (workspace_key, lexeme, shard) DO UPDATE SET df = lexeme_df.df + EXCLUDED.df"
    ).format(d=sql.Identifier(deleted))


async def count_changed(conn: Connection, workspace_key: int, old: Any, new: Any) -> None:
    """Move the counts from tsvector *old* to tsvector *new* (texts as PostgreSQL prints them)."""
    await conn.execute(_CHANGE, {"ws": workspace_key, "old": old, "new": new})
