"""WriteBackService: every write to a workspace's memories.

Each write validates everything first (one INVALID_ARGUMENT naming every bad field),
embeds outside the database transaction, then stores rows, history events, stats and
the idempotency record in one tenant transaction: a failed request stores nothing.

Idempotency (request_id): the first request's reply is kept and returned to retries; a
reused id with another body is INVALID_ARGUMENT on `request_id`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from memplane.domain.models import (
    ConversationMessage,
    Memory,
    MemoryEvent,
    MemoryType,
    NewMemory,
    Principal,
    Provenance,
    Scope,
    Workspace,
    index_text,
)
from memplane.domain.validation import (
    Violations,
    check_batch,
    check_new_memory,
    check_request_id,
    check_scope,
    check_text,
    check_time,
    parse_memory_id,
)
from memplane.embedding.compat import ensure_compatible
from memplane.errors import FieldViolation, InvalidArgumentError, NotFoundError, VersionConflictError
from memplane.quota.meter import EmbeddingMeter
from memplane.settings import LimitsSettings
from memplane.storage.blobs import ToolResultBlobStore
from memplane.storage.database import Connection, Database
from memplane.storage.idempotency import Claim, IdempotencyStore, request_hash, request_hash_with_vectors
from memplane.storage.inserts import PreparedMemory, RequestRecord
from memplane.storage.memories import Change, MemoryStore
from memplane.storage.transcripts import AUTO_ID_PREFIX, TranscriptStore
from memplane.text.segment import segment

# Fields UpdateMemory may change (proto names → column names).
UPDATABLE_FIELDS = {
    "name": "name",
    "description": "description",
    "content": "content",
    "type": "type",
    "metadata": "metadata",
    "valid_from_time": "valid_from",
    "valid_to_time": "valid_to",
    "expire_time": "expires_at",
}
_TEXT_FIELDS = {"name", "description", "content"}
_MAX_UPDATE_ATTEMPTS = 8  # optimistic retries when no expected_version was given


@dataclasses.dataclass(frozen=True)
class ConversationResult:
    """What WriteConversation stored."""

    memories: list[Memory]
    transcript_message_count: int
    method: str


def _describe_turn(message: ConversationMessage, when: datetime) -> str:
    """ "[8 May 2023] Caroline": the turn's date (UTC) and speaker, so that the indexed text
    reads "[date] speaker: text" (see `index_text`); the exact time is in metadata."""
    speaker = message.name or message.role.value
    return f"[{when.strftime('%-d %B %Y')}] {speaker}"


@dataclasses.dataclass(frozen=True)
class _Request:
    """A write's idempotency identity: its request id, RPC and body digest (hashed once),
    and, for a body whose digest scheme changed, the digest earlier versions stored."""

    request_id: str
    method: str
    digest: bytes
    earlier: Callable[[], bytes] | None = None

    @classmethod
    def of(cls, request_id: str, method: str, body: Callable[[], Any]) -> _Request:
        """*body* is called only with a request id (no id: nothing to hash)."""
        return cls(request_id, method, request_hash(method, body()) if request_id else b"")

    @classmethod
    def adding(cls, request_id: str, items: Sequence[NewMemory]) -> _Request:
        """AddMemories of *items*, embeddings included (another vector is another
        request), hashed as bytes (`request_hash_with_vectors`)."""
        if not request_id:
            return cls(request_id, "AddMemories", b"")
        body = [dataclasses.asdict(dataclasses.replace(m, embedding=None)) for m in items]
        digest = request_hash_with_vectors("AddMemories", body, [m.embedding for m in items])
        return cls(request_id, "AddMemories", digest, lambda: request_hash("AddMemories", _earlier_bodies(items)))


def _earlier_bodies(items: Sequence[NewMemory]) -> list[dict[str, Any]]:
    """The bodies AddMemories hashed as JSON before `request_hash_with_vectors` (records
    such a server stored are kept a day: a retry across an upgrade must still match)."""
    bodies = []
    for m in items:
        body = dataclasses.asdict(dataclasses.replace(m, embedding=None))
        body["embedding"] = None if m.embedding is None else list(m.embedding)
        bodies.append(body)
    return bodies


def _checked(claim: Claim) -> dict[str, Any] | None:
    """The stored result of a claimed request id (None: not done yet); a reused id with
    another body is `InvalidArgumentError` on `request_id`."""
    if not claim.same_request:
        raise InvalidArgumentError(FieldViolation("request_id", "was already used for a different request"))
    replay: dict[str, Any] | None = claim.replay
    return replay


class WriteBackService:
    """Writes of one workspace at a time; the workspace comes from the caller's principal."""

    def __init__(
        self,
        *,
        db: Database,
        memories: MemoryStore,
        transcripts: TranscriptStore,
        blobs: ToolResultBlobStore,
        idempotency: IdempotencyStore,
        meter: EmbeddingMeter,
        limits: LimitsSettings,
    ) -> None:
        self._db = db
        self._blobs = blobs
        self._memories = memories
        self._transcripts = transcripts
        self._idempotency = idempotency
        self._meter = meter
        self._embedder = meter.embedder
        self._limits = limits

    async def _prepare(self, workspace: Workspace, items: Sequence[NewMemory]) -> list[PreparedMemory]:
        todo = [i for i, m in enumerate(items) if m.embedding is None]
        embedder = self._meter.for_workspace(workspace)
        vectors = await embedder.embed_documents([items[i].index_text() for i in todo]) if todo else None
        by_index = dict(zip(todo, vectors, strict=True)) if vectors is not None else {}
        return [
            PreparedMemory(
                memory=m,
                lexical_text=segment(m.index_text()),
                embedding=by_index[i] if i in by_index else np.asarray(m.embedding, dtype=np.float32),
            )
            for i, m in enumerate(items)
        ]

    async def _once(
        self,
        workspace: Workspace,
        request: _Request,
        work: Callable[[Connection], Awaitable[dict[str, Any]]],
        stored: list[Memory] | None = None,
    ) -> tuple[dict[str, Any], list[Memory]]:
        """Run *work* in a tenant transaction, at most once per request id.

        *work* returns a JSON result naming the memories it touched by id (`ids`), never
        their text: idempotency records must not keep content that an erasure removes.
        A retry's memories are loaded by id in the same transaction, so it gets them as
        they are now (fewer, if some were deleted meanwhile); when *work* ran in this
        call and filled *stored* with what it wrote, those are the reply (no re-read).
        """
        async with self._db.tenant(workspace.key, pipeline=True) as conn:
            result: dict[str, Any] | None = None
            if request.request_id:
                claim = await self._idempotency.claim(
                    conn, workspace.key, request.request_id, request.method, request.digest, earlier=request.earlier
                )
                result = _checked(claim)
            if result is None:
                result = await work(conn)
                if request.request_id:
                    await self._idempotency.complete(conn, workspace.key, request.request_id, result)
                if stored is not None:
                    return result, stored
            return result, await self._memories_of(conn, workspace, result)

    async def _replay(self, workspace: Workspace, request: _Request) -> tuple[dict[str, Any], list[Memory]] | None:
        """The stored reply of a completed request id, checked before any embedding (a
        retried import then costs a lookup, not a model call). None: do the work."""
        if not request.request_id:
            return None
        async with self._db.tenant(workspace.key) as conn:
            claim = await self._idempotency.lookup(
                conn, workspace.key, request.request_id, request.method, request.digest, earlier=request.earlier
            )
            result = _checked(claim) if claim is not None else None
            if result is None:
                return None
            return result, await self._memories_of(conn, workspace, result)

    async def _memories_of(self, conn: Connection, workspace: Workspace, result: dict[str, Any]) -> list[Memory]:
        ids = [str(i) for i in result.get("ids", [])]
        found = await self._memories.get_many(conn, workspace, ids)
        return [found[i] for i in ids if i in found]

    async def add(
        self, principal: Principal, workspace: Workspace, items: Sequence[NewMemory], request_id: str = ""
    ) -> list[Memory]:
        """Store *items* as given (no LLM); return them in order.

        Raises `InvalidArgumentError` (fields named `memories[i].…`), `QuotaExceededError`,
        `EmbeddingMismatchError`.
        """
        now = datetime.now(UTC)  # the stored valid_from of items without one, checked against valid_to
        v = Violations()
        check_batch(v, "memories", len(items), self._limits)
        check_request_id(v, "request_id", request_id, self._limits)
        for i, item in enumerate(items[: self._limits.max_batch_size]):
            check_new_memory(v, f"memories[{i}]", item, self._limits, workspace.embedding_dimensions, now=now)
        v.raise_if_any()
        ensure_compatible(workspace, self._embedder)
        request = _Request.adding(request_id, items)
        if any(m.embedding is None for m in items):
            # A retry is answered before the model is called; with every vector given, the
            # write's own claim answers it (one transaction, not two).
            replayed = await self._replay(workspace, request)
            if replayed is not None:
                return replayed[1]
        prepared = await self._prepare(workspace, items)
        record = RequestRecord(request_id, request.method, request.digest) if request_id else None
        for _ in range(2):  # a second pass only if the record taken was swept meanwhile
            # One statement, committed by the server as it ends (memplane_insert_memories)
            async with self._db.autocommit() as conn:
                stored, pending = await self._memories.insert_once(
                    conn, workspace, prepared, record, actor=principal.actor, request_id=request_id, now=now
                )
                claimed = await pending.claimed()
            if claimed:
                return stored
            replayed = await self._replay(workspace, request)
            if replayed is not None:
                return replayed[1]
        raise RuntimeError(f"request id {request_id!r} was neither claimable nor found")

    async def write_conversation(
        self,
        principal: Principal,
        workspace: Workspace,
        scope: Scope,
        messages: Sequence[ConversationMessage],
        request_id: str = "",
    ) -> ConversationResult:
        """Append *messages* to the session transcript and store one EPISODIC memory per
        message (speaker, role, message id and time in metadata; "speaker, date" as the
        description so dates are searchable). No LLM: method "episodic".

        Raises `InvalidArgumentError` (empty session_id, bad or duplicate message ids, …).
        """
        v = Violations()
        check_scope(v, "scope", scope, self._limits)
        if not scope.session_id:
            v.add("scope.session_id", "is required to write a conversation")
        check_batch(v, "messages", len(messages), self._limits)
        check_request_id(v, "request_id", request_id, self._limits)
        seen: set[str] = set()
        for i, m in enumerate(messages[: self._limits.max_batch_size]):
            check_text(v, f"messages[{i}].content", m.content, self._limits.max_content_bytes, required=True)
            check_text(v, f"messages[{i}].name", m.name, self._limits.max_id_bytes)
            check_text(v, f"messages[{i}].id", m.id, self._limits.max_id_bytes)
            check_time(v, f"messages[{i}].create_time", m.created_at)
            if m.id.startswith(AUTO_ID_PREFIX):
                v.add(
                    f"messages[{i}].id",
                    f"must not start with {AUTO_ID_PREFIX!r} (reserved for server-numbered messages)",
                )
            if m.id and m.id in seen:
                v.add(f"messages[{i}].id", f"duplicates message id {m.id!r} in this request")
            seen.add(m.id)
        v.raise_if_any()
        ensure_compatible(workspace, self._embedder)
        now = datetime.now(UTC)
        items = []
        for m in messages:
            when = m.created_at or now
            metadata: dict[str, Any] = {"role": m.role.value, "turn_time": when.isoformat()}
            if m.name:
                metadata["speaker"] = m.name
            if m.id:
                metadata["message_id"] = m.id
            items.append(
                NewMemory(
                    content=m.content,
                    scope=scope,
                    type=MemoryType.EPISODIC,
                    description=_describe_turn(m, when),
                    metadata=metadata,
                    valid_from=when,
                    provenance=Provenance(session_id=scope.session_id, message_ids=(m.id,) if m.id else ()),
                )
            )
        request = _Request.of(
            request_id,
            "WriteConversation",
            lambda: {"scope": dataclasses.asdict(scope), "messages": [dataclasses.asdict(m) for m in messages]},
        )
        replayed = await self._replay(workspace, request)
        if replayed is not None:
            return ConversationResult(replayed[1], int(replayed[0]["count"]), "episodic")
        prepared = await self._prepare(workspace, items)

        async def work(conn: Connection) -> dict[str, Any]:
            given = [m.id for m in messages if m.id]
            clash = await self._transcripts.existing_ids(conn, workspace, scope.session_id, given) if given else []
            if clash:
                where = [i for i, m in enumerate(messages) if m.id in set(clash)]
                raise InvalidArgumentError(
                    [FieldViolation(f"messages[{i}].id", "is already in the session's transcript") for i in where]
                )
            ids = await self._transcripts.append(conn, workspace, scope, messages, now=now)
            final = [
                dataclasses.replace(
                    p,
                    memory=dataclasses.replace(
                        p.memory,
                        provenance=Provenance(scope.session_id, (mid,)),
                        metadata={**p.memory.metadata, "message_id": mid},
                    ),
                )
                for p, mid in zip(prepared, ids, strict=True)
            ]
            rows = await self._memories.insert(
                conn, workspace, final, actor=principal.actor, request_id=request_id, now=now
            )
            written.extend(rows)
            return {"ids": [m.id for m in written], "count": len(ids)}

        written: list[Memory] = []
        result, stored = await self._once(workspace, request, work, written)
        return ConversationResult(stored, int(result["count"]), "episodic")

    async def update(
        self,
        principal: Principal,
        workspace: Workspace,
        memory_id: str,
        values: NewMemory,
        mask: Sequence[str],
        *,
        expected_version: int = 0,
        request_id: str = "",
    ) -> Memory:
        """Change the fields named in *mask* to their values in *values*.

        Raises `InvalidArgumentError` (unknown mask path → `update_mask`, bad values →
        `memory.<field>`), `NotFoundError`, `VersionConflictError` (ABORTED) when
        *expected_version* is non-zero and stale.
        """
        v = Violations()
        canonical = parse_memory_id(v, "id", memory_id)
        check_request_id(v, "request_id", request_id, self._limits)
        if not mask:
            v.add("update_mask", "must name at least one field")
        for path in mask:
            if path not in UPDATABLE_FIELDS:
                v.add("update_mask", f"cannot update {path!r}; updatable: {sorted(UPDATABLE_FIELDS)}")
        if expected_version < 0:
            v.add("expected_version", "must not be negative")
        v.raise_if_any()
        ensure_compatible(workspace, self._embedder)
        for attempt in range(_MAX_UPDATE_ATTEMPTS):
            async with self._db.tenant(workspace.key) as conn:
                current = await self._memories.get(conn, workspace, canonical)
            if current is None:
                raise NotFoundError("memory", memory_id)
            if expected_version and current.version != expected_version:
                raise VersionConflictError(current.id, expected_version, current.version)
            merged = NewMemory(
                content=values.content if "content" in mask else current.content,
                scope=current.scope,
                type=values.type if "type" in mask else current.type,
                name=values.name if "name" in mask else current.name,
                description=values.description if "description" in mask else current.description,
                metadata=values.metadata if "metadata" in mask else current.metadata,
                valid_from=(values.valid_from or current.valid_from)
                if "valid_from_time" in mask
                else current.valid_from,
                valid_to=values.valid_to if "valid_to_time" in mask else current.valid_to,
                expires_at=values.expires_at if "expire_time" in mask else current.expires_at,
            )
            v = Violations()
            check_new_memory(v, "memory", merged, self._limits, workspace.embedding_dimensions)
            v.raise_if_any()
            fields: dict[str, Any] = {
                "name": merged.name,
                "description": merged.description,
                "content": merged.content,
                "type": merged.type.value,
                "metadata": merged.metadata,
                "valid_from": merged.valid_from,
                "valid_to": merged.valid_to,
                "expires_at": merged.expires_at,
            }
            fields = {col: fields[col] for path, col in UPDATABLE_FIELDS.items() if path in mask}
            embedding = lexical = None
            if _TEXT_FIELDS.intersection(mask):
                text = index_text(merged.name, merged.description, merged.content)
                embedding = (await self._meter.for_workspace(workspace).embed_documents([text]))[0]
                lexical = segment(text)
                fields["content_bytes"] = len(text.encode())
            change = Change(fields=fields, embedding=embedding, lexical_text=lexical)
            now = datetime.now(UTC)
            snapshot_current = current

            async def work(
                conn: Connection, current: Memory = snapshot_current, change: Change = change, now: datetime = now
            ) -> dict[str, Any]:
                updated = await self._memories.update(
                    conn, workspace, current, change, actor=principal.actor, request_id=request_id, now=now
                )
                return {"ids": [updated.id]}

            body = {
                "id": canonical,
                "mask": sorted(mask),
                "values": dataclasses.asdict(values),
                "expected_version": expected_version,
            }
            request = _Request.of(request_id, "UpdateMemory", functools.partial(dict, body))
            try:
                _, found = await self._once(workspace, request, work)
            except VersionConflictError:
                if expected_version:
                    raise
                await asyncio.sleep(random.uniform(0, 0.005 * (attempt + 1)))  # noqa: S311 - jitter, not crypto
                continue  # a concurrent writer won; re-read and apply on top of it
            if not found:
                raise NotFoundError("memory", memory_id)  # deleted since this request id's first run
            return found[0]
        raise VersionConflictError(canonical, 0, 0)

    async def delete(
        self,
        principal: Principal,
        workspace: Workspace,
        memory_id: str,
        *,
        expected_version: int = 0,
        request_id: str = "",
    ) -> str:
        """Delete one memory (history keeps a DELETE event with the memory as `before`).

        Raises `InvalidArgumentError`, `NotFoundError`, `VersionConflictError`.
        """
        v = Violations()
        canonical = parse_memory_id(v, "id", memory_id)
        check_request_id(v, "request_id", request_id, self._limits)
        if expected_version < 0:
            v.add("expected_version", "must not be negative")
        v.raise_if_any()
        now = datetime.now(UTC)

        async def work(conn: Connection) -> dict[str, Any]:
            current = await self._memories.get(conn, workspace, canonical, lock=True)
            if current is None:
                raise NotFoundError("memory", memory_id)
            if expected_version and current.version != expected_version:
                raise VersionConflictError(current.id, expected_version, current.version)
            await self._memories.delete(conn, workspace, current, actor=principal.actor, request_id=request_id, now=now)
            return {"id": canonical}

        body = {"id": canonical, "expected_version": expected_version}
        result, _ = await self._once(workspace, _Request.of(request_id, "DeleteMemory", lambda: body), work)
        return str(result["id"])

    async def delete_by_scope(
        self, principal: Principal, workspace: Workspace, scope: Scope, request_id: str = ""
    ) -> tuple[int, int]:
        """Erase a scope (right to be forgotten): its memories, the content of their
        history, its transcript messages and its stored tool outputs. Returns
        (memories, messages) deleted.

        Raises `InvalidArgumentError` on an empty scope (it would erase the workspace).
        """
        v = Violations()
        check_scope(v, "scope", scope, self._limits)
        check_request_id(v, "request_id", request_id, self._limits)
        if scope.is_empty():
            v.add("scope", "must set at least one of user_id, agent_id, session_id")
        v.raise_if_any()
        now = datetime.now(UTC)

        async def work(conn: Connection) -> dict[str, Any]:
            n = await self._memories.delete_by_scope(
                conn, workspace, scope, actor=principal.actor, request_id=request_id, now=now
            )
            messages = await self._transcripts.delete_by_scope(conn, workspace, scope)
            await self._blobs.delete_by_scope(conn, workspace, scope)
            return {"memories": n, "messages": messages}

        request = _Request.of(request_id, "DeleteMemoriesByScope", lambda: dataclasses.asdict(scope))
        result, _ = await self._once(workspace, request, work)
        return int(result["memories"]), int(result["messages"])

    async def history(self, workspace: Workspace, memory_id: str) -> list[MemoryEvent]:
        """Events of one memory, oldest first. Raises `NotFoundError` when the workspace
        never had it, `InvalidArgumentError` for a malformed id."""
        v = Violations()
        canonical = parse_memory_id(v, "memory_id", memory_id)
        v.raise_if_any()
        async with self._db.tenant(workspace.key) as conn:
            events = await self._memories.events(conn, workspace, canonical)
        if not events:
            raise NotFoundError("memory", memory_id)
        return events
