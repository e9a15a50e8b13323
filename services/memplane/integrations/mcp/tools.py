"""What each MCP tool does: one or a few calls of the client SDK with the key the
server was started with, and the reply as JSON (the same object as the result's text
and its `structured_content`).

Every failure is a tool result with `is_error` True and a message for the model to read,
never a protocol error or a crash: arguments off the schema (``top_k: 'five' is not of
type 'integer'``), memplane's `InvalidArgumentError` with its fields renamed to the
tool's arguments (``content: must not be empty``), `NotFoundError` (``memory '…' not
found``), `UnauthenticatedError` (a key revoked while the server runs), any other
`MemplaneError` with its class name. Shapes:

- a memory: ``{"id", "content", "type", "user_id", "agent_id", "session_id", "version",
  "create_time", "update_time"}`` (RFC 3339 UTC), plus ``"name"``, ``"description"``,
  ``"metadata"``, ``"valid_to_time"``, ``"expire_time"`` when set;
- search_memories: ``{"hits": [memory + "score" + "relevance"]}``, best first (the
  rank score, relative to the query's candidates, and the absolute relevance 0..1 that
  ``min_relevance`` cuts);
- add_memory: ``{"memory": memory}``; get_memories: ``{"memories": [memory]}`` in the
  order of ``ids``; delete_memories: ``{"deleted": [id]}``; list_memories:
  ``{"memories": [memory], "next_page_token": str}``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types
from google.protobuf import json_format, struct_pb2

from memplane.client.aio import AsyncMemplaneClient
from memplane.errors import FieldViolation, InvalidArgumentError, MemplaneError, UnauthenticatedError
from memplane.integrations.mcp import schemas
from memplane.integrations.mcp.schemas import TOOLS, ArgumentError, check_arguments
from memplane.v1 import filter_pb2, memory_pb2

_log = logging.getLogger("memplane.mcp")

# Request paths of memplane's field violations → the tool's argument names.
_FIELD_PREFIXES = re.compile(r"^(?:memories\[0\]\.|filter\.)?(?:scope\.)?")
_QUERY_FIELD = re.compile(r"^queries(?:\[0\])?")

__all__ = ["TOOLS", "MemoryTools", "memory_dict"]


def memory_dict(memory: memory_pb2.Memory) -> dict[str, Any]:
    """*memory* as the tools return it (see the module docstring)."""
    out: dict[str, Any] = {
        "id": memory.id,
        "content": memory.content,
        "type": memory_pb2.MemoryType.Name(memory.type).removeprefix("MEMORY_TYPE_").lower(),
        "user_id": memory.scope.user_id,
        "agent_id": memory.scope.agent_id,
        "session_id": memory.scope.session_id,
        "version": memory.version,
        "create_time": memory.create_time.ToJsonString(),
        "update_time": memory.update_time.ToJsonString(),
    }
    if memory.name:
        out["name"] = memory.name
    if memory.description:
        out["description"] = memory.description
    if memory.HasField("metadata"):
        out["metadata"] = json_format.MessageToDict(memory.metadata)
    for stamp in ("valid_to_time", "expire_time"):
        if memory.HasField(stamp):
            out[stamp] = getattr(memory, stamp).ToJsonString()
    return out


def _filter(arguments: Mapping[str, Any]) -> filter_pb2.MemoryFilter:
    return filter_pb2.MemoryFilter(
        user_id=arguments.get("user_id", ""),
        agent_id=arguments.get("agent_id", ""),
        session_id=arguments.get("session_id", ""),
    )


def _argument_name(field: str) -> str:
    """memplane's request path *field* as the tool's argument (``memories[0].scope.user_id``
    → ``user_id``, ``queries[0]`` → ``query``); a path with no such argument stays as is."""
    return _QUERY_FIELD.sub("query", _FIELD_PREFIXES.sub("", field))


def error_message(error: MemplaneError) -> str:
    """The text of the tool error for *error*."""
    if isinstance(error, InvalidArgumentError):
        renamed = [FieldViolation(_argument_name(v.field), v.description) for v in error.violations]
        return "invalid argument: " + str(InvalidArgumentError(renamed))
    if isinstance(error, UnauthenticatedError):
        return f"memplane refused the API key this MCP server was started with: {error}"
    return f"{type(error).__name__}: {error}"


def _result(payload: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(payload, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], structured_content=payload)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


class MemoryTools:
    """The tools over *client* (an `AsyncMemplaneClient` holding a workspace key; the
    caller closes it)."""

    def __init__(self, client: AsyncMemplaneClient) -> None:
        self._client = client
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {
            schemas.SEARCH: self._search,
            schemas.ADD: self._add,
            schemas.GET: self._get,
            schemas.DELETE: self._delete,
            schemas.LIST: self._list,
        }

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        """Run tool *name*; every failure is a result with `is_error` True (module docstring)."""
        handler = self._handlers.get(name)
        if handler is None:
            return _error(f"unknown tool {name!r}; the tools are: {', '.join(self._handlers)}")
        try:
            checked = check_arguments(name, arguments or {})
            return _result(await handler(checked))
        except ArgumentError as error:
            return _error(f"invalid argument: {error}")
        except MemplaneError as error:
            _log.info("tool %s failed: %s", name, type(error).__name__)
            return _error(error_message(error))
        except Exception as error:  # a bug here must not take the server (and every other call) down
            _log.exception("tool %s crashed", name)
            return _error(f"internal error in memplane mcp ({type(error).__name__}); see its log")

    async def _search(self, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = await self._client.search(
            arguments["query"],
            top_k=arguments["top_k"],
            min_relevance=arguments.get("min_relevance", 0.0),
            filter=_filter(arguments),
        )
        return {
            "hits": [
                {**memory_dict(hit.memory), "score": round(hit.score, 6), "relevance": round(hit.relevance, 6)}
                for hit in reply.hits
            ]
        }

    async def _add(self, arguments: dict[str, Any]) -> dict[str, Any]:
        metadata = None
        if "metadata" in arguments:
            metadata = struct_pb2.Struct()
            metadata.update(arguments["metadata"])
        memory = memory_pb2.MemoryInput(
            content=arguments["content"],
            scope=memory_pb2.Scope(
                user_id=arguments.get("user_id", ""),
                agent_id=arguments.get("agent_id", ""),
                session_id=arguments.get("session_id", ""),
            ),
            type=memory_pb2.MemoryType.Value(f"MEMORY_TYPE_{arguments['type'].upper()}"),
            metadata=metadata,
        )
        (stored,) = await self._client.add_memories([memory])
        return {"memory": memory_dict(stored)}

    async def _memories(self, ids: list[str]) -> list[memory_pb2.Memory]:
        """The memories of *ids* in order; a malformed id's violation is named ``ids[i]``."""
        found = []
        for index, memory_id in enumerate(ids):
            try:
                found.append(await self._client.get_memory(memory_id))
            except InvalidArgumentError as error:
                renamed = [FieldViolation(f"ids[{index}]", v.description) for v in error.violations]
                raise InvalidArgumentError(renamed) from None
        return found

    async def _get(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"memories": [memory_dict(m) for m in await self._memories(arguments["ids"])]}

    async def _delete(self, arguments: dict[str, Any]) -> dict[str, Any]:
        ids: list[str] = arguments["ids"]
        await self._memories(ids)  # every id first: one not found deletes nothing
        return {"deleted": [await self._client.delete_memory(memory_id) for memory_id in ids]}

    async def _list(self, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = await self._client.list_memories(
            filter=_filter(arguments), page_size=arguments["page_size"], page_token=arguments.get("page_token", "")
        )
        return {"memories": [memory_dict(m) for m in reply.memories], "next_page_token": reply.next_page_token}
