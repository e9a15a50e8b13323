"""Storing new memories in one statement: the rows, their BM25 document frequencies
(`lexeme_df`), the workspace's counters and quotas, their ADD events and, when the
caller knows its reply beforehand, the request id's idempotency record.

One write used to be seven statements and a second transaction (the idempotency
lookup) — about 4 ms of a one-memory AddMemories between Python, psycopg and the round
trips. Now it is one call of `memplane_insert_memories` (migration 0011), which enters the
workspace and runs one statement of data-modifying CTEs (every value a bound parameter,
the text the same for any number of rows, so psycopg prepares it). Alone on an
autocommit connection it is a whole transaction, committed by the server as it ends. Its
CTEs take their row locks in the order the separate statements did — memories, lexeme
counters (in lexeme order), the workspace's counters, events — so concurrent inserts and
deletes still never deadlock (test_concurrent_writers_of_shared_lexemes).

Since migration 0014 no row of the workspace is locked by every write: the counters are
the connection's shard of `workspace_counters` and the event ids come from the
workspace's sequence, so writers on different connections do not wait for each other's
commits (test_counters.py)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg import AsyncCursor
from psycopg.types.json import Jsonb

from memplane.domain.models import Memory, NewMemory, Workspace
from memplane.server.storage.binary_arrays import Int4Array, JsonbArray, TextArray, TimestamptzArray, VectorArray
from memplane.server.storage.database import Connection, fetch_one
from memplane.server.storage.rows import snapshot

# Full-text configuration: English stemming and stop words; CJK text arrives already
# segmented into space-separated words (memplane.text.segment), which 'english' keeps
# as-is (the Snowball stemmer leaves non-Latin words alone).
TS_CONFIG = "english"


@dataclass(frozen=True)
class PreparedMemory:
    """A memory ready to insert: the text to index lexically (segmented) and its vector."""

    memory: NewMemory
    lexical_text: str
    embedding: np.ndarray


@dataclass(frozen=True)
class RequestRecord:
    """The idempotency record of a write whose reply is known before it runs: the ids of
    the memories it adds, stored as `{"ids": [...]}` (as `WriteBackService` reads a
    reply back) by the same statement as the rows."""

    request_id: str
    method: str
    digest: bytes


# memplane_insert_memories (migration 0011) enters the workspace and runs the statement.
# Every parameter goes in binary (%b): pgvector's text form of a vector[] cost 1.2 ms of
# Python per 384-d vector (a float-by-float str()), the binary one 36 µs, and PostgreSQL
# then parses no decimal text either; the other arrays' text form (each element quoted
# and escaped by regular expression) cost 257 µs per one-memory call, binary 88 µs. The
# arrays go as typed wrappers (`memplane.server.storage.binary_arrays`), whose dumpers know their
# oids: psycopg's own list dumper inspects every list's elements on every call first.
INSERT_FUNCTION = "memplane_insert_memories"
_INSERT = (
    "SELECT claimed, duplicate_ords, duplicate_ids FROM memplane_insert_memories("
    "%(ws)b, %(claim_id)b, %(method)b, %(digest)b, %(result)b,"
    " %(ids)b::uuid[], %(user_ids)b::text[], %(agent_ids)b::text[], %(session_ids)b::text[], %(types)b::text[],"
    " %(names)b::text[], %(descriptions)b::text[], %(contents)b::text[], %(metadata)b::jsonb[],"
    " %(embeddings)b::vector[], %(lexical_texts)b::text[], %(content_bytes)b::int[],"
    " %(valid_froms)b::timestamptz[], %(valid_tos)b::timestamptz[], %(expires)b::timestamptz[],"
    " %(source_sessions)b::text[], %(source_messages)b::text[], %(afters)b::text[],"
    " %(actor)b, %(request_id)b, %(now)b, %(dedupe)b, %(in_graph)b)"
)


def new_memories(workspace: Workspace, items: Sequence[PreparedMemory], now: datetime) -> list[Memory]:
    """The memories *items* become when stored at *now*: a fresh id each, version 1, an
    expiry from the workspace's retention policy for those without one."""
    return [
        Memory(
            id=str(uuid.uuid4()),
            scope=(new := item.memory).scope,
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
        for item in items
    ]


@dataclass(frozen=True)
class InsertOutcome:
    """What an insert did: whether its request record was claimed and its rows written
    (True without a record), and, with deduplication, the rows not stored because their
    normalised content is a current memory of their scope: {0-based position in the
    request: the id of that memory} (migration 0013)."""

    claimed: bool
    duplicates: dict[int, str]


class PendingInsert:
    """An insert of *rows* memories sent to the server (in pipeline mode, not yet
    answered); *stored*, if given, is called once with the rows it stored (claimed, less
    the duplicates not stored) when its outcome is read."""

    def __init__(
        self, cursor: AsyncCursor[dict[str, Any]] | None, rows: int = 0, stored: Callable[[int], None] | None = None
    ) -> None:
        self._cursor = cursor
        self._rows = rows
        self._stored = stored

    async def outcome(self) -> InsertOutcome:
        """The insert's `InsertOutcome`. Read it once, when the results arrived: after the
        transaction block of a pipeline, or at once (a fetch)."""
        if self._cursor is None:
            return InsertOutcome(True, {})
        row = await fetch_one(self._cursor)
        ords, ids = row["duplicate_ords"] or [], row["duplicate_ids"] or []
        outcome = InsertOutcome(bool(row["claimed"]), {int(o) - 1: str(i) for o, i in zip(ords, ids, strict=True)})
        if self._stored is not None:
            stored, self._stored = self._stored, None
            stored(self._rows - len(outcome.duplicates) if outcome.claimed else 0)
        return outcome

    async def claimed(self) -> bool:
        """`outcome().claimed`: whether the request record was claimed and the rows written."""
        return (await self.outcome()).claimed


async def insert_memories(
    conn: Connection,
    workspace: Workspace,
    items: Sequence[PreparedMemory],
    memories: Sequence[Memory],
    *,
    actor: str,
    request_id: str,
    now: datetime,
    record: RequestRecord | None = None,
    dedupe: bool = False,
    in_graph: bool = True,
    stored: Callable[[int], None] | None = None,
) -> PendingInsert:
    """Send the insert of *memories* (from `new_memories(items)`, in order) with ADD events
    and the workspace's counters, and *record* if given. Nothing is waited for: in a
    pipeline the statement, the tenant settings before it and COMMIT after it reach the
    server together. `PendingInsert.claimed()` is False when *record*'s request id was
    already taken: then nothing was written (read that record instead). *request_id* is
    what the events record.

    Errors arrive with the statement's results (at the next fetch, or when the pipeline's
    transaction ends): `QuotaExceededError` (the whole transaction rolls back) when the
    workspace would exceed its `max_memories` or `max_bytes`, read in this transaction so
    that a quota just changed applies at once (`memplane_check_workspace_quotas`,
    migration 0014: over the sums of the counter shards); a NOT NULL violation if the
    workspace has no counter row or event sequence (a bug).

    With *dedupe* (direct AddMemories), a memory whose normalised content
    (`memplane_content_key`: NFKC, lower case, whitespace collapsed) is already a current
    memory of its scope, or an earlier one of *memories*, is not stored: a NOOP event on
    that memory instead, and `PendingInsert.outcome().duplicates` names it (the request
    record then names it too). Atomic with concurrent inserts of the same text (a unique
    index). SQLSTATE 40001 in the rare case the memory that won such a race was closed or
    deleted before this insert saw it (nothing written; retry).

    *in_graph*: the rows enter the workspace's HNSW graph in this statement; False leaves
    them to the vector indexer (`memplane.server.storage.vector_index`, migration 0020).
    *stored*: told the rows stored when the outcome is read (`PendingInsert`).
    """
    if not memories:
        return PendingInsert(None)
    params = insert_params(
        workspace,
        items,
        memories,
        actor=actor,
        request_id=request_id,
        now=now,
        record=record,
        dedupe=dedupe,
        in_graph=in_graph,
    )
    return PendingInsert(await conn.execute(_INSERT, params), len(memories), stored)


def insert_statement(function: str = INSERT_FUNCTION) -> str:
    """The statement `insert_memories` sends, calling *function* (a function of
    `memplane_insert_memories`' signature: bench/ingest_parts.py times variants of it)."""
    return _INSERT.replace(INSERT_FUNCTION + "(", function + "(", 1)


def insert_params(
    workspace: Workspace,
    items: Sequence[PreparedMemory],
    memories: Sequence[Memory],
    *,
    actor: str,
    request_id: str,
    now: datetime,
    record: RequestRecord | None = None,
    dedupe: bool = False,
    in_graph: bool = True,
) -> dict[str, Any]:
    """The bound parameters of `insert_statement()` for `insert_memories`' arguments."""
    return {
        "ws": workspace.key,
        "claim_id": record.request_id if record else "",
        "method": record.method if record else "",
        "digest": record.digest if record else b"",
        "result": Jsonb({"ids": [m.id for m in memories]} if record else None),
        "ids": TextArray([m.id for m in memories]),
        "user_ids": TextArray([m.scope.user_id for m in memories]),
        "agent_ids": TextArray([m.scope.agent_id for m in memories]),
        "session_ids": TextArray([m.scope.session_id for m in memories]),
        "types": TextArray([m.type.value for m in memories]),
        "names": TextArray([m.name for m in memories]),
        "descriptions": TextArray([m.description for m in memories]),
        "contents": TextArray([m.content for m in memories]),
        "metadata": JsonbArray([m.metadata for m in memories]),
        "embeddings": VectorArray([item.embedding for item in items]),
        "lexical_texts": TextArray([item.lexical_text for item in items]),
        "content_bytes": Int4Array([len(item.memory.index_text().encode()) for item in items]),
        "valid_froms": TimestamptzArray([m.valid_from for m in memories]),
        "valid_tos": TimestamptzArray([m.valid_to for m in memories]),
        "expires": TimestamptzArray([m.expires_at for m in memories]),
        "source_sessions": TextArray([m.provenance.session_id for m in memories]),
        "source_messages": TextArray([json.dumps(m.provenance.message_ids) for m in memories]),
        "afters": TextArray([json.dumps(snapshot(m)) for m in memories]),
        "actor": actor,
        "request_id": request_id,
        "now": now,
        "dedupe": dedupe,
        "in_graph": in_graph,
    }
