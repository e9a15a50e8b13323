"""Memories and their history inside one workspace partition.

Every method takes a connection from `Database.tenant(workspace.key)`, so each call runs
in the caller's transaction (a write and its history, stats and idempotency record
commit or roll back together) and under row-level security.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import sql
from psycopg.types.json import Jsonb

from memplane.domain.filters import MemoryFilter
from memplane.domain.models import EventKind, Memory, MemoryEvent, Scope, Workspace
from memplane.errors import VersionConflictError
from memplane.server.storage.commits import after_commit
from memplane.server.storage.database import Connection, fetch_one
from memplane.server.storage.filters import Params, compile_filter
from memplane.server.storage.history import load_events, record_events
from memplane.server.storage.inserts import (
    TS_CONFIG,
    PendingInsert,
    PreparedMemory,
    RequestRecord,
    insert_memories,
    new_memories,
)
from memplane.server.storage.lexemes import count_changed, removal_cte
from memplane.server.storage.rows import MEMORY_COLUMNS, memory_from_row
from memplane.server.storage.statistics import PartitionAnalyzer
from memplane.server.storage.vector_index import VectorIndexer


@dataclass(frozen=True)
class Change:
    """New values for an update; `embedding`/`lexical_text` set when the text changed."""

    fields: dict[str, Any]
    embedding: np.ndarray | None = None
    lexical_text: str | None = None


class MemoryStore:
    """Reads and writes of the `memories` and `memory_events` partitions, with the
    workspace's stats and BM25 document frequencies (`lexeme_df`) kept current in the
    same transaction. Searching is `memplane.server.storage.search`. Holds no state but
    the *indexer* of a process that writes: it decides whether an insert's rows wait
    outside the HNSW graph (`VectorIndexer.defers`, migration 0020) and is told of each
    deferred insert once it has committed (`memplane.server.storage.commits`); without
    one (a process that does not write) every insert enters the graph. Its *analyzer*
    (None: none) is told the rows each insert stored (read from its outcome: duplicates
    and replays store none) once it has committed, and keeps the partition's planner
    statistics current (`memplane.server.storage.statistics`)."""

    def __init__(self, indexer: VectorIndexer | None = None, analyzer: PartitionAnalyzer | None = None) -> None:
        self._indexer = indexer
        self._analyzer = analyzer

    def _stored(self, workspace: Workspace) -> Callable[[int], None] | None:
        """What tells the analyzer the rows an insert stored, once its transaction has
        committed (None without an analyzer)."""
        analyzer, key = self._analyzer, workspace.key
        if analyzer is None:
            return None

        def stored(rows: int) -> None:
            if rows > 0:
                after_commit(lambda: analyzer.wrote(key, rows))

        return stored

    def _in_graph(self, workspace: Workspace, count: int) -> bool:
        """Whether *count* new rows enter the graph in their own statement; notes the insert."""
        if self._indexer is None:
            return True
        indexer, key = self._indexer, workspace.key
        if indexer.defers(key, count):
            after_commit(lambda: indexer.mark(key, count))  # a pass then finds the rows committed
            return False
        return True

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
        """Insert *items* with ADD events and updated stats, in one statement
        (`memplane.server.storage.inserts`); return the stored memories. A memory without an
        expiry gets one from the workspace's retention policy.

        Raises `QuotaExceededError` (the caller's transaction then rolls back) when the
        workspace would exceed its `max_memories` or `max_bytes` (read in this
        transaction, so a quota just changed by UpdateWorkspace applies at once) — in
        pipeline mode at the next fetch or at the end of the transaction.
        """
        memories = new_memories(workspace, items, now)
        in_graph = self._in_graph(workspace, len(items))
        await insert_memories(
            conn, workspace, items, memories, actor=actor, request_id=request_id, now=now, in_graph=in_graph
        )
        if (stored := self._stored(workspace)) is not None:
            stored(len(memories))  # all of them, or the transaction fails
        return memories

    async def insert_deduplicated(
        self,
        conn: Connection,
        workspace: Workspace,
        items: Sequence[PreparedMemory],
        *,
        actor: str,
        request_id: str,
        now: datetime,
    ) -> tuple[list[Memory], dict[int, str]]:
        """`insert` with deduplication (`insert_memories`' *dedupe*), waited for: the
        memories as they would be stored, and {position: id of the stored memory} for the
        items not stored as duplicates (their memory in the list is not stored). Raises as
        `insert`, at once."""
        memories = new_memories(workspace, items, now)
        pending = await insert_memories(
            conn,
            workspace,
            items,
            memories,
            actor=actor,
            request_id=request_id,
            now=now,
            dedupe=True,
            in_graph=self._in_graph(workspace, len(items)),
            stored=self._stored(workspace),
        )
        return memories, (await pending.outcome()).duplicates

    async def insert_once(
        self,
        conn: Connection,
        workspace: Workspace,
        items: Sequence[PreparedMemory],
        record: RequestRecord | None,
        *,
        actor: str,
        request_id: str,
        now: datetime,
        dedupe: bool = False,
    ) -> tuple[list[Memory], PendingInsert]:
        """`insert` together with *record*, the request's idempotency record (its reply:
        these memories' ids), in the same statement: the memories it stores, and whether it
        did (`PendingInsert.outcome().claimed`, False when the request id was already taken
        and nothing was written; in a pipeline, read it after the transaction block). On an
        `autocommit()` connection the statement is the whole transaction. With *dedupe*,
        items whose normalised content is a current memory of their scope are not stored
        (`insert_memories`; `outcome().duplicates` names the memories holding them).
        Raises as `insert`."""
        memories = new_memories(workspace, items, now)
        pending = await insert_memories(
            conn,
            workspace,
            items,
            memories,
            actor=actor,
            request_id=request_id,
            now=now,
            record=record,
            dedupe=dedupe,
            in_graph=self._in_graph(workspace, len(items)),
            stored=self._stored(workspace),
        )
        return memories, pending

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
        oldest_first: bool = False,
    ) -> tuple[list[Memory], int]:
        """A page of memories matching *flt* (`list_matching`) and the total count matching
        the filter."""
        memories = await self.list_matching(
            conn, workspace, flt, now=now, limit=limit, after=after, oldest_first=oldest_first
        )
        count_params = Params(ws=workspace.key)
        cur = await conn.execute(
            sql.SQL("SELECT count(*) AS n FROM memories m WHERE m.workspace_key = %(ws)s AND {}").format(
                compile_filter(flt, count_params, now)
            ),
            count_params.values,
        )
        row = await fetch_one(cur)
        return memories, int(row["n"])

    async def list_matching(
        self,
        conn: Connection,
        workspace: Workspace,
        flt: MemoryFilter,
        *,
        now: datetime,
        limit: int,
        after: tuple[datetime, str] | None = None,
        oldest_first: bool = False,
    ) -> list[Memory]:
        """At most *limit* memories matching *flt*, newest first (created_at, id; oldest
        first with *oldest_first*), starting after the keyset *after*; one statement, no
        count. Both orders walk memories_created_idx (forwards or backwards)."""
        params = Params(ws=workspace.key, limit=limit)
        where = compile_filter(flt, params, now)
        keyset: sql.Composable = sql.SQL("TRUE")
        if after is not None:
            keyset = sql.SQL("(m.created_at, m.id) {} ({}, {})").format(
                sql.SQL(">" if oldest_first else "<"), params.bind(after[0]), params.bind(after[1], "uuid")
            )
        direction = sql.SQL("ASC" if oldest_first else "DESC")
        cur = await conn.execute(
            sql.SQL(
                "SELECT {cols} FROM memories m WHERE m.workspace_key = %(ws)s AND {where} AND {keyset}"
                " ORDER BY m.created_at {dir}, m.id {dir} LIMIT %(limit)s"
            ).format(cols=sql.SQL(MEMORY_COLUMNS), where=where, keyset=keyset, dir=direction),
            params.values,
        )
        return [memory_from_row(r) for r in await cur.fetchall()]

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
        `QuotaExceededError` if a larger text would pass the workspace's `max_bytes`.
        A change of content or validity drops the row's duplicate key (`insert_memories`)."""
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
        if {"content", "valid_to"}.intersection(change.fields):
            # Another text or validity: the row no longer answers duplicates of its old
            # text (migration 0013), and reopening it can never clash with a newer copy.
            assignments.append(sql.SQL("content_key = NULL"))
        params.update(ws=workspace.key, id=current.id, version=current.version, now=now)
        cur = await conn.execute(
            sql.SQL(
                "WITH old AS (SELECT content_bytes, lexical_length, lexical FROM memories"
                "  WHERE workspace_key = %(ws)s AND id = %(id)s AND version = %(version)s FOR UPDATE)"
                " UPDATE memories m SET {assign}, version = m.version + 1, updated_at = %(now)s"
                " FROM old WHERE m.workspace_key = %(ws)s AND m.id = %(id)s AND m.version = %(version)s"
                " RETURNING {cols}, m.content_bytes - old.content_bytes AS d_bytes,"
                " m.lexical_length - old.lexical_length AS d_len, old.lexical::text AS old_lexical,"
                " m.lexical::text AS new_lexical"
            ).format(assign=sql.SQL(", ").join(assignments), cols=sql.SQL(MEMORY_COLUMNS)),
            params,
        )
        row = await cur.fetchone()
        if row is None:
            raise await self._conflict(conn, workspace, current)
        updated = memory_from_row(row)
        # The lexeme counters before the stats row, as every insert takes them
        # (memplane_insert_memories): one lock order, so an update and an insert of one
        # workspace never wait on each other in a cycle.
        if change.lexical_text is not None:
            await count_changed(conn, workspace.key, row["old_lexical"], row["new_lexical"])
        await conn.execute(
            "WITH s AS (UPDATE workspace_counters s SET content_bytes = s.content_bytes + %(bytes)s,"
            "  lexical_length_sum = s.lexical_length_sum + %(len)s"
            "  WHERE s.workspace_key = %(ws)s AND s.shard = memplane_counter_shard() RETURNING 1)"
            " SELECT memplane_check_workspace_quotas(%(ws)s, 0, %(bytes)s) FROM s",
            {"bytes": row["d_bytes"], "len": row["d_len"], "ws": workspace.key},
        )  # QuotaExceededError at the next fetch or at COMMIT (the transaction then rolls back)
        await record_events(
            conn,
            workspace.key,
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
            sql.SQL("m.id = %(id)s AND m.version = %(version)s"),
            {"id": current.id, "version": current.version},
        )
        if not deleted:
            raise await self._conflict(conn, workspace, current)
        await record_events(
            conn,
            workspace.key,
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
        values = {"user_id": scope.user_id, "agent_id": scope.agent_id, "session_id": scope.session_id}
        conds = [sql.SQL("m.{} = {}").format(sql.Identifier(c), sql.Placeholder(c)) for c, v in values.items() if v]
        deleted = await self._delete_where(
            conn, workspace, sql.SQL(" AND ").join(conds), {c: v for c, v in values.items() if v}
        )
        if deleted:
            ids = [d[0] for d in deleted]
            await conn.execute(
                "UPDATE memory_events SET before = NULL, after = NULL"
                " WHERE workspace_key = %s AND memory_id = ANY(%s::uuid[])",
                (workspace.key, ids),
            )
            await record_events(
                conn,
                workspace.key,
                [(i, EventKind.DELETE, None, None, s) for i, s in deleted],
                actor=actor,
                request_id=request_id,
                now=now,
            )
        return len(deleted)

    async def _delete_where(
        self, conn: Connection, workspace: Workspace, where: sql.Composable, params: dict[str, Any]
    ) -> list[tuple[str, Scope]]:
        """Delete the workspace's memories matching *where* (named *params*), with the stats
        and document frequencies in the same statement; return (id, scope) of each."""
        cur = await conn.execute(
            sql.SQL(
                "WITH d AS (DELETE FROM memories m WHERE m.workspace_key = %(ws)s AND {where}"
                "  RETURNING m.workspace_key, m.id, m.user_id, m.agent_id, m.session_id, m.content_bytes,"
                "  m.lexical_length, m.lexical),"
                " s AS (UPDATE workspace_counters SET memory_count = memory_count - (SELECT count(*) FROM d),"
                "  content_bytes = content_bytes - (SELECT coalesce(sum(content_bytes), 0) FROM d),"
                "  lexical_length_sum = lexical_length_sum - (SELECT coalesce(sum(lexical_length), 0) FROM d)"
                "  WHERE workspace_key = %(ws)s AND shard = memplane_counter_shard()"
                "  AND EXISTS (SELECT FROM d)),"
                " df AS ({removal})"
                " SELECT id, user_id, agent_id, session_id FROM d"
            ).format(where=where, removal=removal_cte("d")),
            {**params, "ws": workspace.key},
        )
        return [
            (str(r["id"]), Scope(user_id=r["user_id"], agent_id=r["agent_id"], session_id=r["session_id"]))
            for r in await cur.fetchall()
        ]

    async def events(self, conn: Connection, workspace: Workspace, memory_id: str) -> list[MemoryEvent]:
        """History of one memory, oldest first (empty if the workspace never had it)."""
        return await load_events(conn, workspace.key, memory_id)

    async def memory_count(self, conn: Connection, workspace: Workspace) -> int:
        """All memories of the workspace (from workspace_stats, the sums of its counter
        shards: no row scan)."""
        cur = await conn.execute("SELECT memory_count FROM workspace_stats WHERE workspace_key = %s", (workspace.key,))
        return int((await fetch_one(cur))["memory_count"])

    async def count_matching(
        self, conn: Connection, workspace: Workspace, flt: MemoryFilter, *, now: datetime, cap: int
    ) -> int:
        """Number of memories matching *flt*, counted up to *cap* + 1 (cheap upper bound)."""
        params = Params(ws=workspace.key, cap=cap + 1)
        cur = await conn.execute(
            sql.SQL(
                "SELECT count(*) AS n FROM (SELECT 1 FROM memories m WHERE m.workspace_key = %(ws)s AND {}"
                " LIMIT %(cap)s) s"
            ).format(compile_filter(flt, params, now)),
            params.values,
        )
        row = await fetch_one(cur)
        return int(row["n"])
