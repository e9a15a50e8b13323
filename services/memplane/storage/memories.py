"""Memories and their history inside one workspace partition.

Every method takes a connection from `Database.tenant(workspace.key)`, so each call runs
in the caller's transaction (a write and its history, stats and idempotency record
commit or roll back together) and under row-level security.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from memplane.domain.filters import MemoryFilter
from memplane.domain.models import EventKind, Memory, MemoryEvent, NewMemory, Scope, Workspace
from memplane.errors import QuotaExceededError, VersionConflictError
from memplane.storage.database import Connection, fetch_one
from memplane.storage.filters import compile_filter
from memplane.storage.rows import MEMORY_COLUMNS, memory_from_row, memory_from_snapshot, snapshot

# Full-text configuration: English stemming and stop words; CJK text arrives already
# segmented into space-separated words (memplane.text.segment), which 'english' keeps
# as-is (the Snowball stemmer leaves non-Latin words alone).
TS_CONFIG = "english"

# Lexemes of one query used for BM25 (a 4 KiB query rarely has more).
MAX_QUERY_LEXEMES = 64


@dataclass(frozen=True)
class PreparedMemory:
    """A memory ready to insert: the text to index lexically (segmented) and its vector."""

    memory: NewMemory
    lexical_text: str
    embedding: np.ndarray


@dataclass(frozen=True)
class Change:
    """New values for an update; `embedding`/`lexical_text` set when the text changed."""

    fields: dict[str, Any]
    embedding: np.ndarray | None = None
    lexical_text: str | None = None


@dataclass(frozen=True)
class ScoredId:
    """A candidate of one retrieval signal."""

    id: str
    score: float


def _vector_cast(dimensions: int) -> sql.Composable:
    return sql.SQL("vector({})").format(sql.Literal(dimensions))


class MemoryStore:
    """Reads and writes of the `memories` and `memory_events` partitions.

    Keeps one piece of state: a cache of BM25 document frequencies per (workspace,
    lexeme), *df_cache_seconds* long. IDF moves slowly with writes, and counting a common
    lexeme through the GIN index is the most expensive step of a lexical search (tens of
    ms at 20k rows), so a slightly stale df is the standard trade (search engines update
    term statistics per segment, not per document).
    """

    def __init__(self, *, df_cache_seconds: float = 60.0, df_cache_entries: int = 100_000) -> None:
        self._df_ttl = df_cache_seconds
        self._df_max = df_cache_entries
        self._df: dict[tuple[int, str], tuple[float, int]] = {}
        self._common: dict[int, tuple[float, dict[str, int]]] = {}

    async def insert(
        self,
        conn: Connection,
        workspace: Workspace,
        items: Sequence[PreparedMemory],
        *,
        actor: str,
        request_id: str,
        now: datetime,
    ) -> list[Memory]:
        """Insert *items* with ADD events and updated stats; return the stored memories.
        A memory without an expiry gets one from the workspace's retention policy.

        Raises `QuotaExceededError` (the caller's transaction then rolls back) when the
        workspace would exceed its `max_memories` or `max_bytes` (read in this
        transaction, so a quota just changed by UpdateWorkspace applies at once).
        """
        memories: list[Memory] = []
        params: list[dict[str, Any]] = []
        for item in items:
            new = item.memory
            memory = Memory(
                id=str(uuid.uuid4()),
                scope=new.scope,
                type=new.type,
                name=new.name,
                description=new.description,
                content=new.content,
                metadata=new.metadata,
                valid_from=new.valid_from or now,
                valid_to=new.valid_to,
                expires_at=new.expires_at or workspace.retention.expiry(new.type, now),
                provenance=new.provenance,
                version=1,
                created_at=now,
                updated_at=now,
            )
            memories.append(memory)
            params.append(
                {
                    "ws": workspace.key,
                    "id": memory.id,
                    "user_id": memory.scope.user_id,
                    "agent_id": memory.scope.agent_id,
                    "session_id": memory.scope.session_id,
                    "type": memory.type.value,
                    "name": memory.name,
                    "description": memory.description,
                    "content": memory.content,
                    "metadata": Jsonb(memory.metadata),
                    "embedding": item.embedding,
                    "lexical_text": item.lexical_text,
                    "content_bytes": len(new.index_text().encode()),
                    "valid_from": memory.valid_from,
                    "valid_to": memory.valid_to,
                    "expires_at": memory.expires_at,
                    "source_session_id": memory.provenance.session_id,
                    "source_message_ids": list(memory.provenance.message_ids),
                    "now": now,
                }
            )
        if not params:
            return []
        async with conn.cursor() as cur:
            await cur.executemany(
                sql.SQL(
                    "INSERT INTO memories (workspace_key, id, user_id, agent_id, session_id, type, name,"
                    " description, content, metadata, embedding, lexical, lexical_length, content_bytes,"
                    " valid_from, valid_to, expires_at, source_session_id, source_message_ids, version,"
                    " created_at, updated_at)"
                    " SELECT %(ws)s, %(id)s, %(user_id)s, %(agent_id)s, %(session_id)s, %(type)s, %(name)s,"
                    " %(description)s, %(content)s, %(metadata)s, %(embedding)s, t.v,"
                    " (SELECT coalesce(sum(cardinality(u.positions)), 0) FROM unnest(t.v) u),"
                    " %(content_bytes)s, %(valid_from)s, %(valid_to)s, %(expires_at)s,"
                    " %(source_session_id)s, %(source_message_ids)s, 1, %(now)s, %(now)s"
                    " FROM (SELECT to_tsvector({cfg}, %(lexical_text)s) AS v) t"
                ).format(cfg=sql.Literal(TS_CONFIG)),
                params,
            )
        await self._record_events(
            conn,
            workspace,
            [(m.id, EventKind.ADD, None, m, m.scope) for m in memories],
            actor=actor,
            request_id=request_id,
            now=now,
        )
        ids = [m.id for m in memories]
        cur = await conn.execute(
            "UPDATE workspace_stats s SET memory_count = s.memory_count + d.n,"
            " content_bytes = s.content_bytes + d.bytes, lexical_length_sum = s.lexical_length_sum + d.len"
            " FROM (SELECT count(*) AS n, coalesce(sum(content_bytes), 0) AS bytes,"
            "       coalesce(sum(lexical_length), 0) AS len"
            "       FROM memories WHERE workspace_key = %s AND id = ANY(%s::uuid[])) d, workspaces w"
            " WHERE s.workspace_key = %s AND w.key = s.workspace_key"
            " RETURNING s.memory_count, s.content_bytes, d.bytes AS added_bytes, w.max_memories, w.max_bytes",
            (workspace.key, ids, workspace.key),
        )
        _check_quotas(workspace, await fetch_one(cur), added=len(ids))
        return memories

    async def _record_events(
        self,
        conn: Connection,
        workspace: Workspace,
        events: Sequence[tuple[str, EventKind, Memory | None, Memory | None, Scope]],
        *,
        actor: str,
        request_id: str,
        now: datetime,
    ) -> None:
        if not events:
            return
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO memory_events (workspace_key, memory_id, kind, before, after, actor,"
                " request_id, scope_user_id, scope_agent_id, scope_session_id, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    (
                        workspace.key,
                        memory_id,
                        kind.value,
                        Jsonb(snapshot(before)) if before is not None else None,
                        Jsonb(snapshot(after)) if after is not None else None,
                        actor,
                        request_id,
                        scope.user_id,
                        scope.agent_id,
                        scope.session_id,
                        now,
                    )
                    for memory_id, kind, before, after, scope in events
                ],
            )

    async def get_many(self, conn: Connection, workspace: Workspace, ids: Sequence[str]) -> dict[str, Memory]:
        """The memories among *ids* that exist in the workspace, by id."""
        if not ids:
            return {}
        cur = await conn.execute(
            sql.SQL("SELECT {} FROM memories m WHERE m.workspace_key = %s AND m.id = ANY(%s::uuid[])").format(
                sql.SQL(MEMORY_COLUMNS)
            ),
            (workspace.key, list(ids)),
        )
        return {str(r["id"]): memory_from_row(r) for r in await cur.fetchall()}

    async def get(self, conn: Connection, workspace: Workspace, memory_id: str, *, lock: bool = False) -> Memory | None:
        """One memory, or None if the workspace has no such memory; *lock* takes a row lock."""
        cur = await conn.execute(
            sql.SQL("SELECT {} FROM memories m WHERE m.workspace_key = %s AND m.id = %s{}").format(
                sql.SQL(MEMORY_COLUMNS), sql.SQL(" FOR UPDATE") if lock else sql.SQL("")
            ),
            (workspace.key, memory_id),
        )
        row = await cur.fetchone()
        return memory_from_row(row) if row is not None else None

    async def list_page(
        self,
        conn: Connection,
        workspace: Workspace,
        flt: MemoryFilter,
        *,
        now: datetime,
        limit: int,
        after: tuple[datetime, str] | None,
    ) -> tuple[list[Memory], int]:
        """A page of memories matching *flt*, newest first (created_at, id), starting after
        the keyset *after*; and the total count matching the filter."""
        where = compile_filter(flt, now)
        keyset: sql.Composable = sql.SQL("TRUE")
        if after is not None:
            keyset = sql.SQL("(m.created_at, m.id) < ({}, {}::uuid)").format(
                sql.Literal(after[0]), sql.Literal(after[1])
            )
        cur = await conn.execute(
            sql.SQL(
                "SELECT {cols} FROM memories m WHERE m.workspace_key = {ws} AND {where} AND {keyset}"
                " ORDER BY m.created_at DESC, m.id DESC LIMIT {limit}"
            ).format(
                cols=sql.SQL(MEMORY_COLUMNS),
                ws=sql.Literal(workspace.key),
                where=where,
                keyset=keyset,
                limit=sql.Literal(limit),
            )
        )
        memories = [memory_from_row(r) for r in await cur.fetchall()]
        cur = await conn.execute(
            sql.SQL("SELECT count(*) AS n FROM memories m WHERE m.workspace_key = {} AND {}").format(
                sql.Literal(workspace.key), where
            )
        )
        row = await fetch_one(cur)
        return memories, int(row["n"])

    async def update(
        self,
        conn: Connection,
        workspace: Workspace,
        current: Memory,
        change: Change,
        *,
        actor: str,
        request_id: str,
        now: datetime,
    ) -> Memory:
        """Apply *change* to *current* if it is still at `current.version`; record an
        UPDATE event. Raises `VersionConflictError` if another writer got there first,
        `QuotaExceededError` if a larger text would pass the workspace's `max_bytes`."""
        assignments: list[sql.Composable] = [
            sql.SQL("{} = {}").format(sql.Identifier(k), sql.Placeholder(k)) for k in change.fields
        ]
        params: dict[str, Any] = {k: Jsonb(v) if k == "metadata" else v for k, v in change.fields.items()}
        if change.embedding is not None:
            assignments.append(sql.SQL("embedding = %(embedding)s"))
            params["embedding"] = change.embedding
        if change.lexical_text is not None:
            assignments.append(sql.SQL("lexical = to_tsvector({}, %(lexical_text)s)").format(sql.Literal(TS_CONFIG)))
            assignments.append(
                sql.SQL(
                    "lexical_length = (SELECT coalesce(sum(cardinality(u.positions)), 0)"
                    " FROM unnest(to_tsvector({}, %(lexical_text)s)) u)"
                ).format(sql.Literal(TS_CONFIG))
            )
            params["lexical_text"] = change.lexical_text
        params.update(ws=workspace.key, id=current.id, version=current.version, now=now)
        cur = await conn.execute(
            sql.SQL(
                "WITH old AS (SELECT content_bytes, lexical_length FROM memories"
                "  WHERE workspace_key = %(ws)s AND id = %(id)s AND version = %(version)s FOR UPDATE)"
                " UPDATE memories m SET {assign}, version = m.version + 1, updated_at = %(now)s"
                " FROM old WHERE m.workspace_key = %(ws)s AND m.id = %(id)s AND m.version = %(version)s"
                " RETURNING {cols}, m.content_bytes - old.content_bytes AS d_bytes,"
                " m.lexical_length - old.lexical_length AS d_len"
            ).format(assign=sql.SQL(", ").join(assignments), cols=sql.SQL(MEMORY_COLUMNS)),
            params,
        )
        row = await cur.fetchone()
        if row is None:
            raise await self._conflict(conn, workspace, current)
        updated = memory_from_row(row)
        cur = await conn.execute(
            "UPDATE workspace_stats s SET content_bytes = s.content_bytes + %s,"
            " lexical_length_sum = s.lexical_length_sum + %s FROM workspaces w"
            " WHERE s.workspace_key = %s AND w.key = s.workspace_key"
            " RETURNING s.memory_count, s.content_bytes, %s::bigint AS added_bytes, w.max_memories, w.max_bytes",
            (row["d_bytes"], row["d_len"], workspace.key, row["d_bytes"]),
        )
        _check_quotas(workspace, await fetch_one(cur), added=0)
        await self._record_events(
            conn,
            workspace,
            [(current.id, EventKind.UPDATE, current, updated, current.scope)],
            actor=actor,
            request_id=request_id,
            now=now,
        )
        return updated

    async def delete(
        self,
        conn: Connection,
        workspace: Workspace,
        current: Memory,
        *,
        actor: str,
        request_id: str,
        now: datetime,
    ) -> None:
        """Delete *current* if still at its version; record a DELETE event with the
        memory as `before`. Raises `VersionConflictError` otherwise."""
        deleted = await self._delete_where(
            conn,
            workspace,
            sql.SQL("m.id = {} AND m.version = {}").format(sql.Literal(current.id), sql.Literal(current.version)),
        )
        if not deleted:
            raise await self._conflict(conn, workspace, current)
        await self._record_events(
            conn,
            workspace,
            [(current.id, EventKind.DELETE, current, None, current.scope)],
            actor=actor,
            request_id=request_id,
            now=now,
        )

    async def _conflict(self, conn: Connection, workspace: Workspace, current: Memory) -> VersionConflictError:
        """The error for a write that found *current* changed (or gone: version 0)."""
        latest = await self.get(conn, workspace, current.id)
        return VersionConflictError(current.id, current.version, latest.version if latest else 0)

    async def delete_by_scope(
        self, conn: Connection, workspace: Workspace, scope: Scope, *, actor: str, request_id: str, now: datetime
    ) -> int:
        """Erase every memory whose scope matches all non-empty fields of *scope*: delete
        the rows, redact before/after of their past events, and record a content-free
        DELETE event each. Returns the number deleted. The caller rejects an empty scope."""
        if scope.is_empty():
            raise ValueError("delete_by_scope needs a non-empty scope")
        conds = [
            sql.SQL("m.{} = {}").format(sql.Identifier(col), sql.Literal(val))
            for col, val in (("user_id", scope.user_id), ("agent_id", scope.agent_id), ("session_id", scope.session_id))
            if val
        ]
        deleted = await self._delete_where(conn, workspace, sql.SQL(" AND ").join(conds))
        if deleted:
            ids = [d[0] for d in deleted]
            await conn.execute(
                "UPDATE memory_events SET before = NULL, after = NULL"
                " WHERE workspace_key = %s AND memory_id = ANY(%s::uuid[])",
                (workspace.key, ids),
            )
            await self._record_events(
                conn,
                workspace,
                [(i, EventKind.DELETE, None, None, s) for i, s in deleted],
                actor=actor,
                request_id=request_id,
                now=now,
            )
        return len(deleted)

    async def _delete_where(
        self, conn: Connection, workspace: Workspace, where: sql.Composable
    ) -> list[tuple[str, Scope]]:
        cur = await conn.execute(
            sql.SQL(
                "WITH d AS (DELETE FROM memories m WHERE m.workspace_key = {ws} AND {where}"
                "  RETURNING m.id, m.user_id, m.agent_id, m.session_id, m.content_bytes, m.lexical_length),"
                " s AS (UPDATE workspace_stats SET memory_count = memory_count - (SELECT count(*) FROM d),"
                "  content_bytes = content_bytes - (SELECT coalesce(sum(content_bytes), 0) FROM d),"
                "  lexical_length_sum = lexical_length_sum - (SELECT coalesce(sum(lexical_length), 0) FROM d)"
                "  WHERE workspace_key = {ws})"
                " SELECT id, user_id, agent_id, session_id FROM d"
            ).format(ws=sql.Literal(workspace.key), where=where)
        )
        return [
            (str(r["id"]), Scope(user_id=r["user_id"], agent_id=r["agent_id"], session_id=r["session_id"]))
            for r in await cur.fetchall()
        ]

    async def events(self, conn: Connection, workspace: Workspace, memory_id: str) -> list[MemoryEvent]:
        """History of one memory, oldest first (empty if the workspace never had it)."""
        cur = await conn.execute(
            "SELECT * FROM memory_events WHERE workspace_key = %s AND memory_id = %s ORDER BY id",
            (workspace.key, memory_id),
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
            )
            for r in await cur.fetchall()
        ]

    async def memory_count(self, conn: Connection, workspace: Workspace) -> int:
        """All memories of the workspace (from workspace_stats, no row scan)."""
        cur = await conn.execute("SELECT memory_count FROM workspace_stats WHERE workspace_key = %s", (workspace.key,))
        return int((await fetch_one(cur))["memory_count"])

    async def count_matching(
        self, conn: Connection, workspace: Workspace, flt: MemoryFilter, *, now: datetime, cap: int
    ) -> int:
        """Number of memories matching *flt*, counted up to *cap* + 1 (cheap upper bound)."""
        cur = await conn.execute(
            sql.SQL(
                "SELECT count(*) AS n FROM (SELECT 1 FROM memories m WHERE m.workspace_key = {} AND {} LIMIT {}) s"
            ).format(sql.Literal(workspace.key), compile_filter(flt, now), sql.Literal(cap + 1))
        )
        row = await fetch_one(cur)
        return int(row["n"])

    async def vector_search(
        self,
        conn: Connection,
        workspace: Workspace,
        query: np.ndarray,
        flt: MemoryFilter,
        *,
        now: datetime,
        limit: int,
        exact: bool,
        ef_search: int,
    ) -> list[ScoredId]:
        """Top *limit* memories by cosine similarity to *query* (shape (dimensions,)).

        exact=True scans the filtered rows (found through the btree scope indexes) and
        sorts them: recall 1.0, the right plan for small scopes. exact=False walks the
        partition's HNSW index with pgvector's iterative scan (relaxed order, re-sorted
        here), so that a filter still yields *limit* rows (pgvector >= 0.8).
        """
        dims = workspace.embedding_dimensions
        distance = sql.SQL("(m.embedding::{cast} <=> {q}::{cast})").format(
            cast=_vector_cast(dims), q=sql.Placeholder("q")
        )
        # Adding 0 hides the ORDER BY from the HNSW index so the planner sorts exactly.
        order = sql.SQL("{} + 0").format(distance) if exact else distance
        if not exact:
            await conn.execute(
                "SELECT set_config('hnsw.ef_search', %s, true),"
                " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                (str(max(ef_search, limit)),),
            )
        cur = await conn.execute(
            sql.SQL(
                "SELECT id, distance FROM (SELECT m.id, {distance} AS distance FROM memories m"
                " WHERE m.workspace_key = {ws} AND {where} ORDER BY {order} LIMIT {limit}) s"
                " ORDER BY distance, id"
            ).format(
                distance=distance,
                ws=sql.Literal(workspace.key),
                where=compile_filter(flt, now),
                order=order,
                limit=sql.Literal(limit),
            ),
            {"q": query},
        )
        return [ScoredId(str(r["id"]), 1.0 - float(r["distance"])) for r in await cur.fetchall()]

    async def lexical_search(
        self,
        conn: Connection,
        workspace: Workspace,
        text: str,
        flt: MemoryFilter,
        *,
        now: datetime,
        limit: int,
        k1: float,
        b: float,
        prefilter: bool = False,
    ) -> list[ScoredId]:
        """Top *limit* memories by Okapi BM25 (Robertson & Zaragoza, 2009) of the lexemes
        of *text* (already CJK-segmented), OR-matched through the partition's GIN index.

        Three statements, each with constant tsqueries so the GIN index serves them: the
        query's lexemes (at most `MAX_QUERY_LEXEMES`); N, the average document length
        (workspace_stats) and each lexeme's document frequency over the workspace (common
        lexemes estimated from ANALYZE's most-common-elements statistics, the rest counted
        through the GIN index, both cached); then BM25 over the filtered candidates.
        IDF is Lucene's ln(1 + (N - df + 0.5) / (df + 0.5)), never negative.
        Cost grows with the candidates' postings, as an exhaustive BM25 does (no WAND
        pruning). *prefilter* (for a filter known to select few rows) materialises the
        filtered rows first, through the btree scope indexes, and tests the tsquery on
        them only.
        """
        cur = await conn.execute(
            sql.SQL(
                "SELECT array(SELECT DISTINCT u.lexeme FROM unnest(to_tsvector({}, %s)) u ORDER BY 1) AS lexemes"
            ).format(sql.Literal(TS_CONFIG)),
            (text,),
        )
        lexemes: list[str] = (await fetch_one(cur))["lexemes"][:MAX_QUERY_LEXEMES]
        if not lexemes:
            return []
        ws = sql.Literal(workspace.key)
        clock = time.monotonic()
        df = {lex: hit[1] for lex in lexemes if (hit := self._df.get((workspace.key, lex))) and hit[0] > clock}
        common = await self._common_lexemes(conn, workspace, clock)
        for lex in lexemes:
            if lex not in df and lex in common:
                df[lex] = common[lex]
        missing = [lex for lex in lexemes if lex not in df]
        counts = [
            sql.SQL(
                "(SELECT count(*) FROM memories d WHERE d.workspace_key = {} AND d.lexical @@ {}::tsquery) AS {}"
            ).format(ws, sql.Literal(_tsquery_term(lex)), sql.Identifier(f"df{i}"))
            for i, lex in enumerate(missing)
        ]
        cur = await conn.execute(
            sql.SQL(
                "SELECT s.memory_count, s.lexical_length_sum{} FROM workspace_stats s WHERE s.workspace_key = {}"
            ).format(sql.SQL("").join(sql.SQL(", {}").format(c) for c in counts), ws)
        )
        row = await fetch_one(cur)
        for i, lex in enumerate(missing):
            df[lex] = int(row[f"df{i}"])
            self._remember_df(workspace.key, lex, df[lex], clock)
        n = max(int(row["memory_count"]), 1)
        avgdl = max(int(row["lexical_length_sum"]) / n, 1.0)
        idf = {lex: bm25_idf(n, df[lex]) for lex in lexemes}
        weights = sql.SQL(", ").join(
            sql.SQL("({}, {}::float8)").format(sql.Literal(lex), sql.Literal(value)) for lex, value in idf.items()
        )
        query = sql.Literal(" | ".join(_tsquery_term(lex) for lex in lexemes))
        cur = await conn.execute(
            sql.SQL(
                "WITH w(lexeme, idf) AS (VALUES {weights}),"
                " {cand}"
                " SELECT cand.id, sum(w.idf * cardinality(u.positions) * ({k1} + 1)"
                "   / (cardinality(u.positions) + {k1} * (1 - {b} + {b} * cand.lexical_length / {avgdl}))) AS score"
                " FROM cand CROSS JOIN LATERAL unnest(cand.lexical) u JOIN w ON w.lexeme = u.lexeme"
                " GROUP BY cand.id ORDER BY score DESC, cand.id LIMIT {limit}"
            ).format(
                weights=weights,
                cand=sql.SQL(
                    "f AS MATERIALIZED (SELECT m.id, m.lexical, m.lexical_length FROM memories m"
                    "   WHERE m.workspace_key = {ws} AND {where}),"
                    " cand AS MATERIALIZED (SELECT f.* FROM f WHERE f.lexical @@ {query}::tsquery)"
                    if prefilter
                    else "cand AS MATERIALIZED (SELECT m.id, m.lexical, m.lexical_length FROM memories m"
                    "   WHERE m.workspace_key = {ws} AND m.lexical @@ {query}::tsquery AND {where})"
                ).format(ws=ws, query=query, where=compile_filter(flt, now)),
                k1=sql.Literal(k1),
                b=sql.Literal(b),
                avgdl=sql.Literal(avgdl),
                limit=sql.Literal(limit),
            )
        )
        return [ScoredId(str(r["id"]), float(r["score"])) for r in await cur.fetchall()]

    async def _common_lexemes(self, conn: Connection, workspace: Workspace, clock: float) -> dict[str, int]:
        """Document frequencies of the workspace's most common lexemes, estimated from
        ANALYZE's statistics (fraction of rows x memory count), cached like exact counts.
        Empty until the partition has been analysed (autovacuum does it as it grows)."""
        cached = self._common.get(workspace.key)
        if cached is not None and cached[0] > clock:
            return cached[1]
        cur = await conn.execute(
            "SELECT st.lexemes, st.freqs, s.memory_count FROM memplane_lexeme_stats() st"
            " CROSS JOIN workspace_stats s WHERE s.workspace_key = %s",
            (workspace.key,),
        )
        row = await cur.fetchone()
        common: dict[str, int] = {}
        if row is not None and row["lexemes"]:
            count = int(row["memory_count"])
            common = {lex: round(freq * count) for lex, freq in zip(row["lexemes"], row["freqs"], strict=False)}
        self._common[workspace.key] = (clock + self._df_ttl, common)
        return common

    def _remember_df(self, workspace_key: int, lexeme: str, df: int, clock: float) -> None:
        if len(self._df) >= self._df_max:
            self._df = {k: v for k, v in self._df.items() if v[0] > clock}
            if len(self._df) >= self._df_max:
                self._df.clear()
        self._df[(workspace_key, lexeme)] = (clock + self._df_ttl, df)


def bm25_idf(n: int, df: int) -> float:
    """Lucene's BM25 IDF: ln(1 + (N - df + 0.5) / (df + 0.5)); N documents, df containing the term."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def _tsquery_term(lexeme: str) -> str:
    """A lexeme quoted for tsquery input syntax (quotes doubled, backslashes escaped), so
    it is taken verbatim, never parsed as operators."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _check_quotas(workspace: Workspace, totals: dict[str, Any], *, added: int) -> None:
    """Raise `QuotaExceededError` when a write of *added* memories (and `added_bytes`)
    left the workspace over `max_memories` or `max_bytes`; *totals* is the stats row
    after the write, with the quotas as stored now. A write that adds nothing (or frees
    bytes) is never refused, so lowering a quota deletes nothing and blocks no erasure."""
    subject = f"workspace:{workspace.name}"
    limit = int(totals["max_memories"])
    if limit and added and totals["memory_count"] > limit:
        raise QuotaExceededError(
            subject,
            f"max_memories: storing {added} more would pass the quota of {limit} memories",
            quota_id="max_memories",
            limit=limit,
        )
    limit = int(totals["max_bytes"])
    grown = int(totals["added_bytes"])
    if limit and grown > 0 and totals["content_bytes"] > limit:
        raise QuotaExceededError(
            subject,
            f"max_bytes: {grown} more bytes of memory text would pass the quota of {limit} bytes",
            quota_id="max_bytes",
            limit=limit,
        )
