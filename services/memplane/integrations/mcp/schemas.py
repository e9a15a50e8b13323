"""The five MCP tools as the client sees them (`tools/list`): name, description, JSON
Schemas (draft 2020-12) of the arguments and of the structured result, hints; and the check of a call's arguments
against that schema, whose message names the argument (``top_k: 'five' is not of type
'integer'``). Limits that the memplane server owns (the longest content, the largest
top_k) are left to it: its InvalidArgument comes back naming the field too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

SEARCH, ADD, GET, DELETE, LIST = "search_memories", "add_memory", "get_memories", "delete_memories", "list_memories"
MAX_IDS = 100  # ids per get_memories / delete_memories call
MAX_PAGE_SIZE = 100  # memories per list_memories page
DEFAULT_TOP_K = 5
DEFAULT_PAGE_SIZE = 20
MEMORY_TYPES = ("user", "feedback", "project", "reference", "procedural", "tool", "episodic")

_SCOPE = {
    "user_id": {"type": "string", "description": "The user the memory is about; empty: none."},
    "agent_id": {"type": "string", "description": "The agent the memory belongs to; empty: none."},
    "session_id": {"type": "string", "description": "The conversation (session) it came from; empty: none."},
}
_FILTER = {
    name: {"type": "string", "description": f"Only memories with this {name}; empty or absent: any."} for name in _SCOPE
}
_IDS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "minItems": 1,
    "maxItems": MAX_IDS,
    "uniqueItems": True,
    "description": f"Memory ids (1 to {MAX_IDS}), as search_memories, add_memory and list_memories return them.",
}


def _object(properties: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": required, "additionalProperties": False}


_TEXT, _TIME = {"type": "string"}, {"type": "string", "format": "date-time"}
# A memory as the tools return it (`memplane.integrations.mcp.tools.memory_dict`).
MEMORY = _object(
    {
        "id": _TEXT,
        "content": _TEXT,
        "type": {"type": "string", "enum": [*MEMORY_TYPES, "unspecified"]},
        "user_id": _TEXT,
        "agent_id": _TEXT,
        "session_id": _TEXT,
        "version": {"type": "integer", "minimum": 1},
        "create_time": _TIME,
        "update_time": _TIME,
        "name": _TEXT,
        "description": _TEXT,
        "metadata": {"type": "object"},
        "valid_to_time": _TIME,
        "expire_time": _TIME,
    },
    ["id", "content", "type", "user_id", "agent_id", "session_id", "version", "create_time", "update_time"],
)
_HIT = {
    **MEMORY,
    "properties": {
        **MEMORY["properties"],
        "score": {"type": "number"},
        "relevance": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": [*MEMORY["required"], "score", "relevance"],
}
_MEMORIES = {"type": "array", "items": MEMORY}


TOOLS: tuple[types.Tool, ...] = (
    types.Tool(
        name=SEARCH,
        title="Search memories",
        description="Hybrid (semantic + keyword) search of the workspace's memories, best first. "
        "Filter by user_id / agent_id / session_id to search one user's or agent's memories only.",
        input_schema=_object(
            {
                "query": {"type": "string", "minLength": 1, "description": "What to look for, in natural language."},
                "top_k": {
                    "type": "integer",
                    "minimum": 1,
                    "default": DEFAULT_TOP_K,
                    "description": "How many memories to return at most.",
                },
                "min_relevance": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "default": 0,
                    "description": "Only memories at least this relevant to the query (0 to 1; 0: any). "
                    "Each hit's relevance is absolute: an unrelated query mostly finds nothing at 0.3.",
                },
                **_FILTER,
            },
            ["query"],
        ),
        output_schema=_object({"hits": {"type": "array", "items": _HIT}}, ["hits"]),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name=ADD,
        title="Add a memory",
        description="Store one memory as given (no LLM rewrites it) in the scope given by user_id / agent_id / "
        "session_id; returns it with its id.",
        input_schema=_object(
            {
                "content": {"type": "string", "minLength": 1, "description": "The memory's text."},
                **_SCOPE,
                "type": {
                    "type": "string",
                    "enum": list(MEMORY_TYPES),
                    "default": "user",
                    "description": "user: a fact or preference of the user; feedback; project; reference; "
                    "procedural: how a task was done; tool: how a tool is used; episodic: what happened.",
                },
                "metadata": {"type": "object", "description": "JSON object kept with the memory (filterable)."},
            },
            ["content"],
        ),
        output_schema=_object({"memory": MEMORY}, ["memory"]),
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    ),
    types.Tool(
        name=GET,
        title="Get memories",
        description="The memories with these ids. An id not in this workspace is an error naming it.",
        input_schema=_object({"ids": _IDS}, ["ids"]),
        output_schema=_object({"memories": _MEMORIES}, ["memories"]),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name=DELETE,
        title="Delete memories",
        description="Delete the memories with these ids. Every id is looked up first: if one is not in this "
        "workspace the call fails naming it and deletes nothing.",
        input_schema=_object({"ids": _IDS}, ["ids"]),
        output_schema=_object({"deleted": {"type": "array", "items": _TEXT}}, ["deleted"]),
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
        ),
    ),
    types.Tool(
        name=LIST,
        title="List memories",
        description="One page of the workspace's memories, newest first, optionally of one user_id / agent_id / "
        "session_id. Pass the reply's next_page_token as page_token for the next page ('' when there is none).",
        input_schema=_object(
            {
                **_FILTER,
                "page_size": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_PAGE_SIZE,
                    "default": DEFAULT_PAGE_SIZE,
                    "description": "Memories per page.",
                },
                "page_token": {"type": "string", "description": "next_page_token of the previous page; empty: first."},
            },
            [],
        ),
        output_schema=_object({"memories": _MEMORIES, "next_page_token": _TEXT}, ["memories", "next_page_token"]),
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
)

_SCHEMAS: dict[str, dict[str, Any]] = {tool.name: tool.input_schema for tool in TOOLS}
_VALIDATORS = {name: Draft202012Validator(schema) for name, schema in _SCHEMAS.items()}


class ArgumentError(ValueError):
    """A tool call's arguments do not match the tool's input schema; the message names
    the argument (``ids[2]: '' should be non-empty``)."""


def check_arguments(tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """*arguments* with the schema's defaults filled in. Raises `ArgumentError` naming
    every bad argument, `KeyError` for a tool that is not one of `TOOLS`."""
    schema = _SCHEMAS[tool]
    errors = sorted(_VALIDATORS[tool].iter_errors(dict(arguments)), key=lambda e: list(map(str, e.path)))
    if errors:
        raise ArgumentError("; ".join(_describe(error, schema, arguments) for error in errors))
    filled = {name: prop["default"] for name, prop in schema["properties"].items() if "default" in prop}
    return {**filled, **arguments}


def _describe(error: ValidationError, schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str:
    known: Mapping[str, Any] = schema["properties"]
    if error.validator == "required" and not error.path:
        missing = [name for name in schema["required"] if name not in arguments]
        return "; ".join(f"{name}: is required" for name in missing)
    if error.validator == "additionalProperties" and not error.path:
        unknown = sorted(name for name in arguments if name not in known)
        return "; ".join(f"{name}: unknown argument (known: {', '.join(known)})" for name in unknown)
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.path).lstrip(".")
    return f"{path or 'arguments'}: {error.message}"
