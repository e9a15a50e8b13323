"""`AsyncMemory` (mem0's open-source `AsyncMemory`) over one `AsyncMemplaneClient`. The
methods, their arguments and the dicts they return are mem0 2.2.1's; what memplane does
differently is said per method. The Platform clients are `memplane.compat.mem0.platform`'s,
the config `memplane.compat.mem0.config`'s, what add() sends `memplane.compat.mem0.writes`'."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any

from memplane import errors
from memplane.client.aio import AsyncMemplaneClient
from memplane.compat.mem0 import shapes, writes
from memplane.compat.mem0.config import client_from_config
from memplane.compat.mem0.errors import ValidationError, as_mem0, platform_only
from memplane.v1 import memory_pb2

_log = logging.getLogger("memplane.compat.mem0")

DEFAULT_TOP_K = 20  # mem0 2.2.1's search() and get_all() default
DEFAULT_THRESHOLD: float | None = None
"""search()'s default: no relevance cut. mem0 2.2.1 defaults to 0.1 on its embedder's cosine;
on memplane's calibrated relevance (SearchHit.relevance) with the default local model, short
facts asked about in other words score as low as off-topic text ("where does alice live?"
against "I moved to Lisbon in March": relevance 0.000 at cosine .739, the off-topic swallow
question against "I love gardening tomatoes" .738), so a default of 0.1 would drop them.
Pass threshold= to cut (docs/integrations/mem0.md#where-memplane-differs)."""
MAX_TOP_K = 100  # memplane's limits.max_top_k; larger requests are clamped to it
LIST_PAGE_SIZE = 100
_MERGE_ATTEMPTS = 3  # update(metadata=) re-reads and merges again when the memory changed meanwhile
_UNSET: Any = object()  # update()'s "expiration_date not given" (None clears it, as in mem0)
PROCEDURAL = "procedural_memory"  # mem0's MemoryType.PROCEDURAL.value


class AsyncMemory:
    """mem0's `AsyncMemory` over memplane. `AsyncMemory()` reads MEMPLANE_TARGET and
    MEMPLANE_API_KEY (a workspace key); `AsyncMemory.from_config({...})` or
    `AsyncMemory(client=AsyncMemplaneClient(...))` say it in code. Raises `ValueError` when
    neither gives a target and key. No side effect at construction (no table, no telemetry).

    Each call is one or a few RPCs on the workspace of the key: Add → AddMemories,
    search → SearchMemories, get → GetMemory, get_all → ListMemories, update → UpdateMemory,
    delete → DeleteMemory, delete_all → DeleteMemoriesByScope, history → ListMemoryEvents."""

    def __init__(self, config: Mapping[str, Any] | None = None, *, client: AsyncMemplaneClient | None = None) -> None:
        self._made: AsyncMemplaneClient | None = client
        self._make: Callable[[], AsyncMemplaneClient] = client_from_config(config) if client is None else _never
        self._batches = writes.Batches()

    @classmethod
    def from_config(cls, config_dict: Mapping[str, Any]) -> AsyncMemory:
        """As mem0's `from_config`: see `client_from_config` for the keys."""
        return cls(config_dict)

    @property
    def _client(self) -> AsyncMemplaneClient:
        if self._made is None:
            self._made = self._make()
        return self._made

    @property
    def client(self) -> AsyncMemplaneClient:
        """The memplane client underneath (for what mem0's API has no call for); made on
        first use, on the running event loop."""
        return self._client

    async def close(self) -> None:
        """Close the gRPC channels (if any call opened them)."""
        if self._made is not None:
            await self._made.close()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def add(
        self,
        messages: Any,
        *,
        user_id: Any = None,
        agent_id: Any = None,
        run_id: Any = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: Any = None,
        expiration_date: Any = None,
        infer: bool = True,
        memory_type: str | None = None,
        prompt: str | None = None,
    ) -> dict[str, Any]:
        """Store *messages* (a str, one message dict, or a list of {"role", "content",
        optional "name"} dicts, any number of them) in the scope of user_id / agent_id /
        run_id (at least one). Each non-system message becomes one memory with *metadata*
        (identity keys dropped, as mem0 does) plus "role" and, from "name", "actor_id".
        *expiration_date* ("YYYY-MM-DD", a date or datetime) is memplane's expire_time at
        the end of that day (UTC): hidden from search / get_all from the next day on.

        *infer*: mem0 runs an LLM in the client to extract facts. memplane's client holds
        no LLM: infer=True over a conversation (messages with an assistant turn, as
        AgentScope's Mem0Middleware writes each exchange) is answered by the write-back
        server's extraction (`writes.extract`): only the facts are stored — the server's LLM's,
        or without one the user's first-person statements and instructions — never a turn, an
        acknowledgement or an assistant's filler; infer=True over a text or user messages
        only stores them as they are, typed `episodic`. infer=False stores them as given,
        typed `user` (or `procedural` with memory_type="procedural_memory"). *prompt*
        (mem0's extraction prompt) is unused.

        Messages go to the server in batches of its `limits.max_batch_size` (256, its default,
        until a refusal names a lower one: `writes.Batches`), in order, each stored atomically.
        When a batch is refused for anything else the error is raised (its note says how many
        messages the earlier batches stored): those stay stored, that batch and the ones after
        it store nothing, and calling add() again with the same messages completes it — the
        stored ones come back as NONE rows.

        Returns {"results": [{"id", "memory", "event"}...]}, with "actor_id" and "role"
        too when infer=False (mem0's shapes), in message order. A message whose text is
        already a memory of the scope (also within the same call) is not stored again:
        its row is that memory with event "NONE". Raises `ValidationError` (a ValueError)
        for no entity id, a bad message list or expiration_date, memory_type other than
        "procedural_memory", *timestamp* (Platform-only in mem0), or content the server
        refuses (size, quota)."""
        if timestamp is not None:
            raise ValidationError(platform_only("timestamp"))
        scope = shapes.scope_of(user_id, agent_id, run_id, required="add()")
        expires = shapes.expiration_date(expiration_date)
        if memory_type is not None and memory_type != PROCEDURAL:
            raise ValidationError(f"Invalid 'memory_type'. Please pass {PROCEDURAL} to create procedural memories.")
        if infer and memory_type is None and writes.is_conversation(messages):
            return await writes.extract(
                self._client, self._batches, messages, scope, base=shapes.user_metadata(metadata), expires=expires
            )
        if memory_type == PROCEDURAL:
            mtype = memory_pb2.MEMORY_TYPE_PROCEDURAL
        else:
            mtype = memory_pb2.MEMORY_TYPE_EPISODIC if infer else memory_pb2.MEMORY_TYPE_USER
        template = memory_pb2.MemoryInput(scope=scope, type=mtype)
        if expires is not None:
            template.expire_time.CopyFrom(shapes.expire_time(expires))
        inputs, kept = writes.inputs(messages, template, shapes.user_metadata(metadata))
        results: list[dict[str, Any]] = []
        async for start, reply in self._batches.send(inputs, "memories", self._client.add_memories_reply):
            duplicates = set(reply.duplicate_indexes)
            for i, (memory, extra) in enumerate(
                zip(reply.memories, kept[start : start + len(reply.memories)], strict=True)
            ):
                row: dict[str, Any] = {
                    "id": memory.id,
                    "memory": memory.content,
                    "event": "NONE" if i in duplicates else "ADD",
                }
                if not infer:
                    row |= {"actor_id": extra.get("actor_id"), "role": extra["role"]}
                results.append(row)
        return {"results": results}

    async def search(
        self,
        query: str,
        *,
        user_id: Any = None,
        agent_id: Any = None,
        run_id: Any = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int | None = None,
        limit: int | None = None,
        threshold: float | None = DEFAULT_THRESHOLD,
        rerank: bool = False,
        explain: bool = False,
        reference_date: Any = None,
        show_expired: bool = False,
    ) -> dict[str, Any]:
        """Hybrid search (vector + lexical) in the scope given by *filters* (mem0 2.x:
        filters={"user_id": ...}) or, as mem0 1.x took them, user_id / agent_id / run_id;
        other filter keys match metadata (see `shapes.memory_filter`). *top_k* (or mem0
        1.x's *limit*) hits, default 20, at most 100. *threshold* (default None:
        every hit, see `DEFAULT_THRESHOLD`; 0 also keeps every hit) drops hits whose relevance (absolute and
        calibrated, 0 to 1: SearchMemories' min_relevance) is below it, so an unrelated
        query can get no hits. *show_expired*
        includes memories past their expiration date that memplane's retention sweep has
        not erased yet (it erases them an hour after they expire). *rerank* is accepted
        and unused (memplane fuses vector and lexical ranks itself).

        Returns {"results": [item, ...]} best first, each item with its "score" (see
        `shapes.memory_item`). Raises `ValidationError` for an empty query, no entity
        id, a bad filter, a threshold that is no number or outside 0..1, a top_k that is
        no non-negative int, *reference_date* (Platform-only in mem0) or *explain*
        (mem0's score_details; memplane's breakdown is `client.search(...)`'s)."""
        del rerank
        if reference_date is not None:
            raise ValidationError(platform_only("reference_date"))
        if explain:
            raise ValidationError(
                "The explain parameter is not supported by memplane's mem0 facade: "
                "memplane's score breakdown per hit is in memory.client.search(...)."
            )
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("Invalid query: cannot be empty or whitespace-only.")
        flt = shapes.memory_filter(filters, shapes.scope_of(user_id, agent_id, run_id), method="search()")
        flt.include_expired = bool(show_expired)
        k = min(_top_k(top_k, limit), MAX_TOP_K)
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, int | float):
                raise ValidationError("threshold must be a valid number")
            if not 0.0 <= threshold <= 1.0:  # NaN fails too
                raise ValidationError(f"Invalid threshold: {threshold}. Must be between 0 and 1 (inclusive).")
        if k == 0:
            return {"results": []}
        with as_mem0():
            reply = await self._client.search(query.strip(), top_k=k, min_relevance=threshold or 0.0, filter=flt)
        return {"results": [shapes.memory_item(hit.memory, score=hit.score) for hit in reply.hits]}

    async def get(self, memory_id: str) -> dict[str, Any] | None:
        """One memory as an item (its "score" None), or None when the workspace has no
        memory with that id (mem0's open-source `get`)."""
        try:
            return shapes.memory_item(await self._client.get_memory(memory_id))
        except (errors.NotFoundError, errors.InvalidArgumentError):
            return None

    async def get_all(
        self,
        *,
        user_id: Any = None,
        agent_id: Any = None,
        run_id: Any = None,
        filters: Mapping[str, Any] | None = None,
        top_k: int | None = None,
        limit: int | None = None,
        show_expired: bool = False,
    ) -> dict[str, Any]:
        """The scope's memories, newest first, at most *top_k* (or *limit*; default 20,
        no upper bound: pages are read until it is reached). Scope and metadata filters as
        in `search`; *show_expired* as there. Returns {"results": [item, ...]} (items
        without "score"). Raises `ValidationError` for a top_k that is no non-negative int."""
        flt = shapes.memory_filter(filters, shapes.scope_of(user_id, agent_id, run_id), method="get_all()")
        flt.include_expired = bool(show_expired)
        wanted = _top_k(top_k, limit)
        items: list[dict[str, Any]] = []
        async for memory in self._listed(flt, wanted):
            items.append(shapes.memory_item(memory, with_score=False))
        return {"results": items}

    async def _listed(self, flt: Any, wanted: int) -> AsyncIterator[memory_pb2.Memory]:
        token, count = "", 0
        while count < wanted:
            with as_mem0():
                page = await self._client.list_memories(
                    filter=flt, page_size=min(LIST_PAGE_SIZE, wanted - count), page_token=token
                )
            for memory in page.memories:
                yield memory
                count += 1
            token = page.next_page_token
            if not token:
                return

    async def update(
        self,
        memory_id: str,
        text: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        expiration_date: Any = _UNSET,
        data: str | None = None,
    ) -> dict[str, str]:
        """Change a memory's text, metadata and/or expiration date, as mem0 does.

        *metadata* is merged into the stored metadata (the keys it names are set, the
        others kept); identity keys it names are dropped (user_id, agent_id, run_id,
        actor_id: fixed at creation), role is the message's unless named. The server keeps
        a conversation turn's message_id, speaker, role and turn_time the same way
        (`memplane.server.writeback.turns`). *expiration_date* sets the expiry ("YYYY-MM-DD"
        as in `add`) or, None, clears it. *data* is mem0's deprecated alias of *text*
        (a warning says so; *text* wins when both are given). memplane keeps the old
        version in the history.

        Returns {"message": "Memory updated successfully!"}. Raises `ValidationError` (a
        ValueError) when nothing is given to change, for a bad expiration_date, or when
        *metadata* names another message_id than the turn's; `MemoryNotFoundError` for an
        unknown id."""
        if data is not None:
            _log.warning(
                "The `data` argument to update() is deprecated and will be removed in the "
                "next major release. Use `text` instead."
            )
            if text is None:
                text = data
        if text is None and metadata is None and expiration_date is _UNSET:
            raise ValidationError("At least one of text, metadata, or expiration_date must be provided.")
        fields, new = [], memory_pb2.MemoryInput()
        if text is not None:
            fields.append("content")
            new.content = text
        if expiration_date is not _UNSET:
            fields.append("expire_time")
            day = shapes.expiration_date(expiration_date)
            if day is not None:
                new.expire_time.CopyFrom(shapes.expire_time(day))
        with as_mem0():
            if metadata is None:
                await self._client.update_memory(memory_id, new, fields)
                return {"message": "Memory updated successfully!"}
            fields.append("metadata")
            for attempt in range(_MERGE_ATTEMPTS):
                current = await self._client.get_memory(memory_id)
                item = shapes.memory_item(current)
                stored = (item["metadata"] or {}) | {k: item[k] for k in shapes.MESSAGE_KEYS if k in item}
                new.metadata.CopyFrom(shapes.struct(stored | shapes.user_metadata(metadata)))
                try:
                    await self._client.update_memory(memory_id, new, fields, expected_version=current.version)
                    break
                except errors.VersionConflictError:  # changed between the read and the write: merge again
                    if attempt == _MERGE_ATTEMPTS - 1:
                        raise
        return {"message": "Memory updated successfully!"}

    async def delete(self, memory_id: str) -> dict[str, str]:
        """Delete one memory (its history stays). Returns {"message": "Memory deleted
        successfully!"}; raises `MemoryNotFoundError` (a ValueError) for an unknown id."""
        with as_mem0():
            await self._client.delete_memory(memory_id)
        return {"message": "Memory deleted successfully!"}

    async def delete_all(self, user_id: Any = None, agent_id: Any = None, run_id: Any = None) -> dict[str, str]:
        """Erase every memory of the scope (all given ids must match), and the scope's
        transcript messages with them (memplane's right to be forgotten). Returns
        {"message": "Memories deleted successfully!"}; raises `ValidationError` without
        any id, as mem0 does."""
        scope = shapes.scope_of(user_id, agent_id, run_id)
        if not (scope.user_id or scope.agent_id or scope.session_id):
            raise ValidationError(
                "At least one filter is required to delete all memories. "
                "memplane has no reset() of a whole workspace from a workspace key."
            )
        with as_mem0():
            reply = await self._client.delete_memories_by_scope(scope)
        _log.info("deleted %d memories", reply.deleted_count)
        return {"message": "Memories deleted successfully!"}

    async def history(self, memory_id: str) -> list[dict[str, Any]]:
        """The memory's changes, oldest first, as mem0's history rows (see
        `shapes.history_row`); [] for an id that never existed."""
        with as_mem0():
            events = await self._client.list_memory_events(memory_id)
        return [shapes.history_row(e) for e in events]

    async def reset(self, *, user_id: Any = None, agent_id: Any = None, run_id: Any = None) -> None:
        """mem0's `reset()` drops every memory of the store. A workspace key cannot do
        that in memplane: without a scope this raises `ValidationError`; with one it is
        `delete_all` of that scope. (An admin deletes a whole workspace: `memplane
        workspace delete NAME`.)"""
        if user_id is None and agent_id is None and run_id is None:
            raise ValidationError(
                "reset() without a scope would erase the whole workspace: memplane refuses it. "
                "Call delete_all(user_id=...) (or reset(user_id=...)); an admin deletes a workspace "
                "with `memplane workspace delete NAME`."
            )
        await self.delete_all(user_id=user_id, agent_id=agent_id, run_id=run_id)


def _never() -> AsyncMemplaneClient:
    raise AssertionError("the client was given at construction")


def _top_k(top_k: int | None, limit: int | None) -> int:
    """*top_k* (else mem0 1.x's *limit*, else 20), checked as mem0's `_validate_search_params`."""
    k = top_k if top_k is not None else limit if limit is not None else DEFAULT_TOP_K
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValidationError("top_k must be a valid integer")
    if k < 0:
        raise ValidationError(f"Invalid top_k: {k}. Must be a non-negative integer.")
    return k
