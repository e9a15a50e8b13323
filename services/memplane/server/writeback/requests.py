"""What every write of WriteBackService shares: its idempotency identity (`WriteRequest`),
running it at most once per request id (`Ledger`), memories made ready to store
(`prepare`: embedded outside any transaction, segmented for the lexical index), and
AddMemories' reply (`Added`, duplicates named).

Idempotency (request_id): the first request's reply is kept and returned to retries; a
reused id with another body is INVALID_ARGUMENT on `request_id`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from memplane.domain.models import Memory, NewMemory, Workspace
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.quota.meter import EmbeddingMeter
from memplane.server.storage.database import Connection
from memplane.server.storage.idempotency import Claim, IdempotencyStore, request_hash, request_hash_with_vectors
from memplane.server.storage.inserts import PreparedMemory
from memplane.server.storage.memories import MemoryStore
from memplane.server.storage.routing import TenantDatabase
from memplane.text.segment import segment


@dataclasses.dataclass(frozen=True)
class WriteRequest:
    """A write's idempotency identity: its request id, RPC and body digest (hashed once),
    and, for a body whose digest scheme changed, the digest earlier versions stored."""

    request_id: str
    method: str
    digest: bytes
    earlier: Callable[[], bytes] | None = None

    @classmethod
    def of(cls, request_id: str, method: str, body: Callable[[], Any]) -> WriteRequest:
        """*body* is called only with a request id (no id: nothing to hash)."""
        return cls(request_id, method, request_hash(method, body()) if request_id else b"")

    @classmethod
    def adding(cls, request_id: str, items: Sequence[NewMemory]) -> WriteRequest:
        """AddMemories of *items*, embeddings included (another vector is another
        request), hashed as bytes (`request_hash_with_vectors`)."""
        if not request_id:
            return cls(request_id, "AddMemories", b"")
        body = [hashed_body(m) for m in items]
        digest = request_hash_with_vectors("AddMemories", body, [m.embedding for m in items])
        return cls(request_id, "AddMemories", digest, lambda: request_hash("AddMemories", _earlier_bodies(items)))


@dataclasses.dataclass(frozen=True)
class Added:
    """The reply of `WriteBackService.add`: the memories in request order, and the
    0-based positions whose item duplicated a stored memory (that memory is in its place)."""

    memories: list[Memory]
    duplicates: tuple[int, ...]

    @classmethod
    def replayed(cls, result: dict[str, Any], memories: list[Memory]) -> Added:
        """The reply of a retried request, from its stored record and memories."""
        return cls(memories, tuple(int(i) for i in result.get("duplicates", [])))


def hashed_body(m: NewMemory) -> dict[str, Any]:
    """What AddMemories hashes of *m* besides its vector: equal to
    `dataclasses.asdict(dataclasses.replace(m, embedding=None))` (so the same digest as
    the records stored before), built field by field without asdict's recursive copies:
    a one-memory AddMemories' digest took 22.5 µs of CPU, now 10.2. A field added to
    `NewMemory` must be added here (tests/unit/test_request_digest.py compares the two)."""
    return {
        "content": m.content,
        "scope": {"user_id": m.scope.user_id, "agent_id": m.scope.agent_id, "session_id": m.scope.session_id},
        "type": m.type,
        "name": m.name,
        "description": m.description,
        "metadata": m.metadata,
        "valid_from": m.valid_from,
        "valid_to": m.valid_to,
        "expires_at": m.expires_at,
        "provenance": {"session_id": m.provenance.session_id, "message_ids": m.provenance.message_ids},
        "embedding": None,
    }


def _earlier_bodies(items: Sequence[NewMemory]) -> list[dict[str, Any]]:
    """The bodies AddMemories hashed as JSON before `request_hash_with_vectors` (records
    such a server stored are kept a day: a retry across an upgrade must still match)."""
    bodies = []
    for m in items:
        body = dataclasses.asdict(dataclasses.replace(m, embedding=None))
        body["embedding"] = None if m.embedding is None else list(m.embedding)
        bodies.append(body)
    return bodies


def checked(claim: Claim) -> dict[str, Any] | None:
    """The stored result of a claimed request id (None: not done yet); a reused id with
    another body is `InvalidArgumentError` on `request_id`."""
    if not claim.same_request:
        raise InvalidArgumentError(FieldViolation("request_id", "was already used for a different request"))
    replay: dict[str, Any] | None = claim.replay
    return replay


class Ledger:
    """Runs writes at most once per request id, and reads back the replies of done ones."""

    def __init__(self, db: TenantDatabase, memories: MemoryStore, idempotency: IdempotencyStore) -> None:
        self._db = db
        self._memories = memories
        self._idempotency = idempotency

    async def once(
        self,
        workspace: Workspace,
        request: WriteRequest,
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
                result = checked(claim)
            if result is None:
                result = await work(conn)
                if request.request_id:
                    await self._idempotency.complete(conn, workspace.key, request.request_id, result)
                if stored is not None:
                    return result, stored
            return result, await self.memories_of(conn, workspace, result)

    async def replay(self, workspace: Workspace, request: WriteRequest) -> tuple[dict[str, Any], list[Memory]] | None:
        """The stored reply of a completed request id, checked before any embedding (a
        retried import then costs a lookup, not a model call). None: do the work."""
        if not request.request_id:
            return None
        async with self._db.tenant(workspace.key) as conn:
            claim = await self._idempotency.lookup(
                conn, workspace.key, request.request_id, request.method, request.digest, earlier=request.earlier
            )
            result = checked(claim) if claim is not None else None
            if result is None:
                return None
            return result, await self.memories_of(conn, workspace, result)

    async def memories_of(self, conn: Connection, workspace: Workspace, result: dict[str, Any]) -> list[Memory]:
        """The memories a stored reply names (`ids`) that still exist, in its order."""
        ids = [str(i) for i in result.get("ids", [])]
        found = await self._memories.get_many(conn, workspace, ids)
        return [found[i] for i in ids if i in found]


async def prepare(meter: EmbeddingMeter, workspace: Workspace, items: Sequence[NewMemory]) -> list[PreparedMemory]:
    """*items* ready to store: each with the text to index lexically (segmented) and its
    vector (the given one, or embedded now, charged to the workspace). Raises
    `QuotaExceededError` past the workspace's daily embedding tokens, and the embedder's
    errors."""
    todo = [i for i, m in enumerate(items) if m.embedding is None]
    embedder = meter.for_workspace(workspace)
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
