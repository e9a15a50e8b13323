"""What `AsyncMemory.add` sends: mem0's messages as memplane's memory inputs (infer=False,
or a text) or conversation messages (infer=True of a conversation), in batches the
server takes (`Batches`)."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from google.protobuf import json_format

from memplane import errors
from memplane.client.aio import AsyncMemplaneClient
from memplane.compat.mem0 import shapes
from memplane.compat.mem0.errors import ValidationError, as_mem0
from memplane.v1 import memory_pb2, writeback_pb2

_log = logging.getLogger("memplane.compat.mem0")

# add(infer=True) of a conversation: the roles WriteConversation takes, and the rows of
# what its extraction did (an LLM's SUPERSEDE adds the new fact: mem0's ADD).
ROLES = {"user": memory_pb2.MESSAGE_ROLE_USER, "assistant": memory_pb2.MESSAGE_ROLE_ASSISTANT}
EVENTS = {"ADD": "ADD", "SUPERSEDE": "ADD", "UPDATE": "UPDATE"}
# Messages per AddMemories / WriteConversation call until the server says its limit: the
# server's limits.max_batch_size default (`Batches` learns a lower one). add() of more sends
# several batches (see AsyncMemory.add for what happens when one is refused).
ADD_BATCH_SIZE = 256
_LIMIT = re.compile(r"\bthe limit is (\d+)\b")
"""The server's words for its limit in the violation of an oversized list (`memplane.server.validation.check_batch`)."""

Item = TypeVar("Item")
Reply = TypeVar("Reply")


class Batches:
    """The size of add()'s batches, learned from the server: `ADD_BATCH_SIZE` until a
    write is refused as too large — INVALID_ARGUMENT with a BadRequest field violation on
    the list itself (`memories` of AddMemories, `messages` of WriteConversation: "holds N
    entries; the limit is L") — then L (half the refused batch if the violation names no
    number), and the refused batch is sent again in parts of that size. The server checks
    a list's size before anything else, so a batch so refused stored nothing and each
    message is still stored once. One `AsyncMemory` keeps what it learned for its later calls."""

    def __init__(self, size: int = ADD_BATCH_SIZE) -> None:
        self.size = size

    async def send(
        self, items: Sequence[Item], field: str, write: Callable[[Sequence[Item]], Awaitable[Reply]]
    ) -> AsyncIterator[tuple[int, Reply]]:
        """Write *items* in order with *write*, one batch at a time: (index of the batch's
        first item, *write*'s reply) per batch. *field* is the request's list field (the
        violation a too-large batch is refused with names it). Any other refusal is raised
        (memplane's bad-input errors as mem0's, `as_mem0`) with a note saying how many
        items the earlier batches stored."""
        start = 0
        while start < len(items):
            batch = items[start : start + self.size]
            try:
                with as_mem0():
                    reply = await write(batch)
            except Exception as exc:
                smaller = _limit(exc.__cause__, field, len(batch)) if isinstance(exc, ValidationError) else None
                if smaller is not None:
                    _log.info(
                        "the server takes at most %d %s per call: add() sends batches of that size", smaller, field
                    )
                    self.size = smaller
                    continue
                if start:
                    exc.add_note(
                        f"add(): the first {start} of {len(items)} messages were stored (earlier batches); "
                        "add() the same messages again to store the rest (the stored ones come back as NONE)"
                    )
                raise
            yield start, reply
            start += len(batch)


def _limit(error: BaseException | None, field: str, sent: int) -> int | None:
    """The smaller batch size *error* asks for when it refused *sent* items as too many
    (a violation of *field* itself), else None."""
    if not isinstance(error, errors.InvalidArgumentError):
        return None
    for violation in error.violations:
        if violation.field == field:
            named = _LIMIT.search(violation.description)
            limit = int(named[1]) if named else sent // 2
            return limit if 1 <= limit < sent else None
    return None


def inputs(
    messages: Any, template: memory_pb2.MemoryInput, base: dict[str, Any]
) -> tuple[list[memory_pb2.MemoryInput], list[dict[str, str]]]:
    """One memory input per non-system message with text (a copy of *template* with its
    content and *base* metadata plus "role" and, from "name", "actor_id"), and those
    per-message keys."""
    inputs, kept = [], []
    for message in shapes.normalize_messages(messages):
        if not isinstance(message, Mapping) or message.get("role") is None or message.get("content") is None:
            _log.warning("skipping a message without role or content")
            continue
        if message["role"] == "system":
            continue
        text = shapes.message_text(message["content"])
        if not text:
            continue
        extra = {"role": str(message["role"])} | ({"actor_id": str(message["name"])} if message.get("name") else {})
        one = memory_pb2.MemoryInput()
        one.CopyFrom(template)
        one.content = text
        one.metadata.CopyFrom(shapes.struct(base | extra))
        inputs.append(one)
        kept.append(extra)
    return inputs, kept


def is_conversation(messages: Any) -> bool:
    """Whether *messages* is a list of message dicts with an assistant turn among them."""
    return isinstance(messages, list) and any(isinstance(m, Mapping) and m.get("role") == "assistant" for m in messages)


def turns(messages: Any) -> list[writeback_pb2.ConversationMessage]:
    """The user and assistant messages of *messages* that hold text, as WriteConversation's
    messages (a message's "name" is its speaker's); system messages and others are left out."""
    return [
        writeback_pb2.ConversationMessage(
            role=ROLES[str(m["role"])], name=str(m.get("name") or ""), content=shapes.message_text(m["content"])
        )
        for m in shapes.normalize_messages(messages)
        if isinstance(m, Mapping)
        and str(m.get("role")) in ROLES
        and m.get("content") is not None
        and shapes.message_text(m["content"])
    ]


async def extract(
    client: AsyncMemplaneClient,
    batches: Batches,
    messages: Any,
    scope: memory_pb2.Scope,
    *,
    base: dict[str, Any],
    expires: str | None,
) -> dict[str, Any]:
    """add(infer=True) of a conversation: WriteConversation with extract, wait and
    skip_episodic (the messages kept in the transcript, no memory per turn), in the
    session *run_id* or, without one, a session of this call ("mem0-<hex>"), in batches
    the server takes (*batches*). The memories extraction added come back as "ADD" rows
    (an LLM's UPDATE as "UPDATE"), with *base* metadata merged into theirs and *expires*
    set when given; a statement already stored is no row (mem0 leaves out what its LLM
    found nothing new in)."""
    session = memory_pb2.Scope()
    session.CopyFrom(scope)
    session.session_id = scope.session_id or f"mem0-{uuid.uuid4().hex}"
    results: list[dict[str, Any]] = []

    async def write(batch: Sequence[writeback_pb2.ConversationMessage]) -> writeback_pb2.WriteConversationResponse:
        return await client.write_conversation(session, batch, extract=True, wait=True, skip_episodic=True)

    async for _, reply in batches.send(turns(messages), "messages", write):
        events = {op.memory_id: op.operation for op in reply.extraction_job.operations if op.outcome == "applied"}
        for memory in reply.extracted_memories:
            event = EVENTS.get(events.get(memory.id, ""), "ADD")
            results.append({"id": memory.id, "memory": memory.content, "event": event})
            await _annotate(client, memory, base, expires)
    return {"results": results}


async def _annotate(
    client: AsyncMemplaneClient, memory: memory_pb2.Memory, base: dict[str, Any], expires: str | None
) -> None:
    """*base* merged into an extracted memory's metadata, and its expiry, when given."""
    if not base and expires is None:
        return
    new, fields = memory_pb2.MemoryInput(), []
    if base:
        new.metadata.CopyFrom(shapes.struct(json_format.MessageToDict(memory.metadata) | base))
        fields.append("metadata")
    if expires is not None:
        new.expire_time.CopyFrom(shapes.expire_time(expires))
        fields.append("expire_time")
    with as_mem0():
        await client.update_memory(memory.id, new, fields)
