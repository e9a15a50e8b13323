"""What `AsyncMemory.add` sends: mem0's messages as memplane's memory inputs (infer=False,
or a text) or conversation messages (infer=True of a conversation), in batches the
server takes."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from memplane.compat.mem0 import shapes
from memplane.v1 import memory_pb2, writeback_pb2

_log = logging.getLogger("memplane.compat.mem0")

# add(infer=True) of a conversation: the roles WriteConversation takes, and the rows of
# what its extraction did (an LLM's SUPERSEDE adds the new fact: mem0's ADD).
ROLES = {"user": memory_pb2.MESSAGE_ROLE_USER, "assistant": memory_pb2.MESSAGE_ROLE_ASSISTANT}
EVENTS = {"ADD": "ADD", "SUPERSEDE": "ADD", "UPDATE": "UPDATE"}
# Messages per AddMemories call: the server's limits.max_batch_size default. add() of more
# sends several batches (see AsyncMemory.add for what happens when one is refused).
ADD_BATCH_SIZE = 256


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
