"""WriteBackService: the writes of a workspace's memories one by one (add, update, delete,
erase a scope) and their history. Conversations are written by
`memplane.server.writeback.conversation`, SummarizeSession's memories by
`memplane.server.writeback.session_facts`; request ids and preparation: `memplane.server.writeback.requests`.

Each write validates everything first (one INVALID_ARGUMENT naming every bad field),
embeds outside the database transaction, then stores rows, history events, stats and
the idempotency record in one tenant transaction: a failed request stores nothing.

Idempotency (request_id): the first request's reply is kept and returned to retries; a
reused id with another body is INVALID_ARGUMENT on `request_id`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import functools
import json
import random
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from memplane.domain.extraction import ExtractionJob, JobStatus
from memplane.domain.models import (
    Memory,
    MemoryEvent,
    NewMemory,
    Principal,
    Scope,
    Workspace,
    index_text,
)
from memplane.errors import (
    FieldViolation,
    InvalidArgumentError,
    NotFoundError,
    QuotaExceededError,
    VersionConflictError,
)
from memplane.server.embedding.compat import ensure_compatible
from memplane.server.quota.meter import EmbeddingMeter
from memplane.server.settings import GroupCommitSettings, LimitsSettings
from memplane.server.storage.blobs import ToolResultBlobStore
from memplane.server.storage.database import Connection
from memplane.server.storage.inserts import InsertOutcome, PendingInsert, RequestRecord
from memplane.server.storage.jobs import ExtractionJobStore
from memplane.server.storage.memories import Change, MemoryStore
from memplane.server.storage.routing import TenantDatabase
from memplane.server.storage.transcripts import TranscriptStore
from memplane.server.validation import (
    Violations,
    check_batch,
    check_entries,
    check_new_memory,
    check_request_id,
    check_scope,
    parse_memory_id,
)
from memplane.server.writeback.group_commit import GroupCommitter, PendingAdd
from memplane.server.writeback.requests import Added, Ledger, WriteRequest, prepare
from memplane.server.writeback.turns import merge_update
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
# An add whose texts to embed total more than this many characters (one model call's worth:
# memplane.server.embedding.batching.DEFAULT_MAX_CHARS) looks its request id up before it
# embeds, so a retried import costs a look-up, not model calls. A smaller one embeds first
# and its write's own claim answers a retry: one database round trip fewer on every add,
# one short embedding more on a retry (issue 31: one-at-a-time ingest).
REPLAY_FIRST_CHARS = 4_096


class _TextChanged(Exception):  # noqa: N818 - a signal inside `WriteBackService.update`, never raised out
    """The text an update indexes changed between its embedding and its row lock."""


@dataclasses.dataclass(frozen=True)
class _PlannedUpdate:
    """What an UpdateMemory stores over one version of the memory: the changed columns,
    and the text to index (None: no text field named, nothing to embed)."""

    fields: dict[str, Any]
    text: str | None


def _plan_update(
    current: Memory, values: NewMemory, mask: Sequence[str], limits: LimitsSettings, workspace: Workspace
) -> _PlannedUpdate:
    """UpdateMemory's change of *mask* to *values* over *current* (`merge_update`).
    Raises `InvalidArgumentError` (fields named `memory.<field>`)."""
    v = Violations()
    merged = merge_update(v, "memory", current, values, mask)
    check_new_memory(v, "memory", merged, limits, workspace.embedding_dimensions)
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
    changed = {*mask, "metadata"} if merged.metadata != current.metadata else set(mask)  # a statement re-keyed
    fields = {col: fields[col] for path, col in UPDATABLE_FIELDS.items() if path in changed}
    if not _TEXT_FIELDS.intersection(mask):
        return _PlannedUpdate(fields, None)
    text = index_text(merged.name, merged.description, merged.content)
    fields["content_bytes"] = len(text.encode())
    return _PlannedUpdate(fields, text)


Inserted = tuple[list[Memory], InsertOutcome]  # an add's memories as stored, and what its insert did


class WriteBackService:
    """Writes of one workspace at a time; the workspace comes from the caller's principal."""

    def __init__(
        self,
        *,
        db: TenantDatabase,
        ledger: Ledger,
        memories: MemoryStore,
        jobs: ExtractionJobStore,
        transcripts: TranscriptStore,
        blobs: ToolResultBlobStore,
        meter: EmbeddingMeter,
        limits: LimitsSettings,
        group_commit: GroupCommitSettings | None = None,
    ) -> None:
        """*ledger* runs each write at most once per request id; *jobs* is the extraction
        job table GetExtractionJob reads; *group_commit* (default: its defaults) how
        concurrent small adds of a workspace share transactions."""
        self._db = db
        self._jobs = jobs
        self._blobs = blobs
        self._memories = memories
        self._transcripts = transcripts
        self._meter = meter
        self._embedder = meter.embedder
        self._limits = limits
        self._ledger = ledger
        self._group_commit = group_commit or GroupCommitSettings()
        self.committer: GroupCommitter[Inserted] = GroupCommitter(  # public: its statistics
            self._insert_one,
            self._insert_group,
            max_inflight=self._group_commit.max_inflight,
            max_members=self._group_commit.max_members,
        )

    async def add(
        self, principal: Principal, workspace: Workspace, items: Sequence[NewMemory], request_id: str = ""
    ) -> list[Memory]:
        """`add_reply`'s memories: *items* stored (or the stored duplicates), in order."""
        return (await self.add_reply(principal, workspace, items, request_id)).memories

    async def add_reply(
        self, principal: Principal, workspace: Workspace, items: Sequence[NewMemory], request_id: str = ""
    ) -> Added:
        """Store *items* as given (no LLM); return them in order. An item whose normalised
        content (NFKC, lower case, whitespace collapsed: `memplane_content_key`, migration
        0013) is already a current memory of its scope, or an earlier item's, is not
        stored: its place in the reply holds that memory, listed in `Added.duplicates`,
        and its history gains a NOOP event.

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
        request = WriteRequest.adding(request_id, items)
        if sum(len(m.index_text()) for m in items if m.embedding is None) > REPLAY_FIRST_CHARS:
            replayed = await self._ledger.replay(workspace, request)
            if replayed is not None:
                return Added.replayed(*replayed)
        try:
            prepared = await prepare(self._meter, workspace, items)
        except QuotaExceededError:
            # A retry of a stored add is answered even past the daily embedding tokens.
            replayed = await self._ledger.replay(workspace, request)
            if replayed is not None:
                return Added.replayed(*replayed)
            raise
        record = RequestRecord(request_id, request.method, request.digest) if request_id else None
        add = PendingAdd(prepared, record, principal.actor, request_id, now)
        for _ in range(2):  # a second pass only if the record taken was swept meanwhile
            stored, outcome = await self._insert(workspace, add)
            if outcome.claimed:
                if not outcome.duplicates:
                    return Added(stored, ())
                async with self._db.tenant(workspace.key) as conn:
                    found = await self._memories.get_many(conn, workspace, list(set(outcome.duplicates.values())))
                held: list[Memory] = []
                duplicates: list[int] = []
                for i, memory in enumerate(stored):
                    if i not in outcome.duplicates:
                        held.append(memory)
                    elif (existing := found.get(outcome.duplicates[i])) is not None:
                        duplicates.append(len(held))
                        held.append(existing)
                    # else: deleted since this add saw it; absent, as from a replayed reply
                return Added(held, tuple(duplicates))
            replayed = await self._ledger.replay(workspace, request)
            if replayed is not None:
                return Added.replayed(*replayed)
        raise RuntimeError(f"request id {request_id!r} was neither claimable nor found")

    async def _insert(self, workspace: Workspace, add: PendingAdd) -> Inserted:
        """*add* through the group committer when it may join a group, else alone."""
        if self._group_commit.enabled and len(add.prepared) <= self._group_commit.max_memories:
            return await self.committer.insert(workspace, add)
        return await self._insert_one(workspace, add)

    async def _insert_one(self, workspace: Workspace, add: PendingAdd) -> Inserted:
        """*add* as one statement, committed by the server as it ends
        (`memplane_insert_memories`): the memories it would store and its outcome."""
        async with self._db.autocommit(workspace.key) as conn:
            stored, pending = await self._send(conn, workspace, add)
            return stored, await pending.outcome()

    async def _insert_group(self, workspace: Workspace, adds: Sequence[PendingAdd]) -> list[Inserted]:
        """*adds* in one tenant transaction, each its own statement, all sent in one round
        trip and committed together: each one's `_insert_one` result. Raises (nothing
        committed) if any of them fails."""
        async with self._db.tenant(workspace.key, pipeline=True) as conn:
            sent = [await self._send(conn, workspace, a) for a in adds]
        return [(stored, await pending.outcome()) for stored, pending in sent]

    async def _send(
        self, conn: Connection, workspace: Workspace, add: PendingAdd
    ) -> tuple[list[Memory], PendingInsert]:
        """Send *add*'s statement (deduplicating) on *conn*; its result arrives with the pipeline's."""
        return await self._memories.insert_once(
            conn, workspace, add.prepared, add.record, actor=add.actor, request_id=add.request_id, now=add.now,
            dedupe=True,
        )  # fmt: skip

    async def extraction_job(self, workspace: Workspace, job_id: str) -> ExtractionJob:
        """One extraction job of the workspace. Raises `InvalidArgumentError` for a
        malformed id, `NotFoundError` for a job the workspace does not have."""
        try:
            canonical = str(uuid.UUID(job_id))
        except ValueError:
            raise InvalidArgumentError(FieldViolation("id", "must be an extraction job id (UUID)")) from None
        async with self._db.tenant(workspace.key) as conn:
            job = await self._jobs.get(conn, workspace, canonical)
        if job is None:
            raise NotFoundError("extraction job", job_id)
        return job

    async def extraction_jobs(
        self, workspace: Workspace, statuses: Sequence[JobStatus], page_size: int, page_token: str
    ) -> tuple[list[ExtractionJob], str]:
        """A page of the workspace's extraction jobs, newest first, in *statuses* (empty:
        any), and the next page's token ("" on the last). *page_size* 0 means 50.
        Raises `InvalidArgumentError` for a page_size outside 0..500 or a page_token not
        from this method."""
        v = Violations()
        if not 0 <= page_size <= MAX_JOB_PAGE_SIZE:
            v.add("page_size", f"must be 0 to {MAX_JOB_PAGE_SIZE}")
        after = _decode_job_token(v, page_token)
        v.raise_if_any()
        limit = page_size or DEFAULT_JOB_PAGE_SIZE
        async with self._db.tenant(workspace.key) as conn:
            jobs = await self._jobs.page(conn, workspace, statuses=statuses, limit=limit + 1, after=after)
        if len(jobs) <= limit:
            return jobs, ""
        last = jobs[limit - 1]
        return jobs[:limit], _encode_job_token(last.created_at, last.id)

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
        `memory.<field>`, a turn's memory kept a turn: `memplane.server.writeback.turns`),
        `NotFoundError`, `VersionConflictError` (ABORTED) when *expected_version* is stale
        (never when it is 0).

        The row is locked before the change is applied, so concurrent updaters of one
        memory queue and each applies on top of the one before it: a blind update
        (*expected_version* 0) always applies. The text is embedded before the lock; when a
        concurrent update changed a text field this one keeps (the vector would be of
        another text), it reads and embeds again, as long as the RPC lasts (its deadline
        cancels it).
        """
        v = Violations()
        canonical = parse_memory_id(v, "id", memory_id)
        check_request_id(v, "request_id", request_id, self._limits)
        if not mask:
            v.add("update_mask", "must name at least one field")
        for path in mask if check_entries(v, "update_mask.paths", len(mask), self._limits.max_enum_entries) else ():
            if path not in UPDATABLE_FIELDS:
                v.add("update_mask", f"cannot update {path!r}; updatable: {sorted(UPDATABLE_FIELDS)}")
        if expected_version < 0:
            v.add("expected_version", "must not be negative")
        v.raise_if_any()
        ensure_compatible(workspace, self._embedder)
        body = {
            "id": canonical,
            "mask": sorted(mask),
            "values": dataclasses.asdict(values),
            "expected_version": expected_version,
        }
        request = WriteRequest.of(request_id, "UpdateMemory", functools.partial(dict, body))
        attempt = 0
        while True:  # again only when a text this update does not set changed while it embedded
            async with self._db.tenant(workspace.key) as conn:
                seen = await self._memories.get(conn, workspace, canonical)
            if seen is None:
                raise NotFoundError("memory", memory_id)
            if expected_version and seen.version != expected_version:
                raise VersionConflictError(seen.id, expected_version, seen.version)
            planned = _plan_update(seen, values, mask, self._limits, workspace)
            embedding = lexical = None
            if planned.text is not None:  # embedded outside the transaction, for the text as seen
                embedding = (await self._meter.for_workspace(workspace).embed_documents([planned.text]))[0]
                lexical = segment(planned.text)

            async def work(
                conn: Connection, planned: _PlannedUpdate = planned, embedding: Any = embedding, lexical: Any = lexical
            ) -> dict[str, Any]:
                # The row locked first: concurrent updaters queue here and each applies on
                # top of the one before it, never refused for having been overtaken.
                current = await self._memories.get(conn, workspace, canonical, lock=True)
                if current is None:
                    raise NotFoundError("memory", memory_id)
                if expected_version and current.version != expected_version:
                    raise VersionConflictError(current.id, expected_version, current.version)
                plan = _plan_update(current, values, mask, self._limits, workspace)
                if plan.text != planned.text:
                    raise _TextChanged  # the vector is of another text: embed again
                change = Change(fields=plan.fields, embedding=embedding, lexical_text=lexical)
                now = datetime.now(UTC)  # under the lock: update times follow the versions
                updated = await self._memories.update(
                    conn, workspace, current, change, actor=principal.actor, request_id=request_id, now=now
                )
                return {"ids": [updated.id]}

            try:
                _, found = await self._ledger.once(workspace, request, work)
            except _TextChanged:
                attempt += 1
                await asyncio.sleep(random.uniform(0, 0.005 * min(attempt, 20)))  # noqa: S311 - jitter, not crypto
                continue
            if not found:
                raise NotFoundError("memory", memory_id)  # deleted since this request id's first run
            return found[0]

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
        result, _ = await self._ledger.once(workspace, WriteRequest.of(request_id, "DeleteMemory", lambda: body), work)
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

        request = WriteRequest.of(request_id, "DeleteMemoriesByScope", lambda: dataclasses.asdict(scope))
        result, _ = await self._ledger.once(workspace, request, work)
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


DEFAULT_JOB_PAGE_SIZE = 50
MAX_JOB_PAGE_SIZE = 500
_NOT_A_JOB_PAGE = "is not a token returned by ListExtractionJobs"


def _encode_job_token(created_at: datetime, job_id: str) -> str:
    raw = json.dumps({"t": created_at.isoformat(), "i": job_id}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_job_token(v: Violations, token: str) -> tuple[datetime, str] | None:
    """The (created_at, id) position of a ListExtractionJobs page token; None for "" and,
    with a violation of page_token added, for anything else that is not one."""
    if not token:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        created = datetime.fromisoformat(data["t"])
        job_id = str(uuid.UUID(data["i"]))
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        v.add("page_token", _NOT_A_JOB_PAGE)
        return None
    if created.tzinfo is None:
        v.add("page_token", _NOT_A_JOB_PAGE)
        return None
    return created, job_id
