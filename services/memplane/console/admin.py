"""The admin key's view: workspaces with their quotas and usage, and each workspace's
API keys (list, create — the key shown once —, revoke).

    GET    api/admin/workspaces?page_token=      -> {workspaces, next_page_token}
    GET    api/admin/workspaces/{name}/keys      -> {keys}
    POST   api/admin/workspaces/{name}/keys {display_name} -> {key_id, api_key}
    DELETE api/admin/keys/{key_id}               -> {key_id}
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memplane.console import inputs
from memplane.console.sessions import Session
from memplane.v1 import admin_pb2

PAGE_SIZE = 25
MAX_KEYS = 1_000

JsonObject = dict[str, Any]


def _time(message: Any, field: str) -> str:
    return str(getattr(message, field).ToJsonString()) if message.HasField(field) else ""


def workspace(ws: admin_pb2.Workspace, usage: admin_pb2.GetWorkspaceUsageResponse) -> JsonObject:
    """A workspace: name, embedding model and dimensions, creation time, quotas (0: no
    limit) and usage (memories, bytes, transcript messages, embedding tokens today)."""
    q = ws.quotas
    return {
        "name": ws.name,
        "embedding_model": ws.embedding_model,
        "embedding_dimensions": ws.embedding_dimensions,
        "create_time": _time(ws, "create_time"),
        "labels": dict(ws.labels),
        "quotas": {
            "max_memories": q.max_memories,
            "max_bytes": q.max_bytes,
            "max_requests_per_second": q.max_requests_per_second,
            "max_embedding_tokens_per_day": q.max_embedding_tokens_per_day,
        },
        "usage": {
            "memory_count": usage.memory_count,
            "content_bytes": usage.content_bytes,
            "storage_bytes": usage.storage_bytes,
            "transcript_message_count": usage.transcript_message_count,
            "embedding_tokens_today": usage.embedding_tokens_today,
            "tool_result_bytes": usage.tool_result_bytes,
        },
    }


async def list_workspaces(request: Request, session: Session) -> Response:
    """A page of 25 workspaces by name, each with its usage."""
    page = await session.client.list_workspaces(
        page_size=PAGE_SIZE, page_token=inputs.text(request.query_params, "page_token", max_chars=4_096)
    )
    usages = await asyncio.gather(*(session.client.get_workspace_usage(ws.name) for ws in page.workspaces))
    return JSONResponse(
        {
            "workspaces": [workspace(ws, u) for ws, u in zip(page.workspaces, usages, strict=True)],
            "next_page_token": page.next_page_token,
        }
    )


async def list_keys(request: Request, session: Session) -> Response:
    """The workspace's keys by key id (revoked ones included, with their revoke time)."""
    name = request.path_params["name"]
    keys: list[admin_pb2.ApiKey] = []
    token = ""
    while len(keys) < MAX_KEYS:
        page = await session.client.list_api_keys(name, page_token=token)
        keys += page.api_keys
        token = page.next_page_token
        if not token:
            break
    return JSONResponse(
        {
            "keys": [
                {
                    "key_id": k.key_id,
                    "display_name": k.display_name,
                    "create_time": _time(k, "create_time"),
                    "revoke_time": _time(k, "revoke_time"),
                }
                for k in keys
            ]
        }
    )


async def create_key(request: Request, session: Session) -> Response:
    """A new key of the workspace; the reply is the only place its secret appears."""
    body = await inputs.json_body(request)
    reply = await session.client.create_api_key(
        request.path_params["name"], inputs.text(body, "display_name", max_chars=200) or "created in the console"
    )
    return JSONResponse({"key_id": reply.key_id, "api_key": reply.api_key})


async def revoke_key(request: Request, session: Session) -> Response:
    """Revoke a key: every session and client holding it is refused from now on."""
    key_id = request.path_params["key_id"]
    await session.client.revoke_api_key(key_id)
    return JSONResponse({"key_id": key_id})


ROUTES = (
    ("/admin/workspaces", list_workspaces, "GET"),
    ("/admin/workspaces/{name}/keys", list_keys, "GET"),
    ("/admin/workspaces/{name}/keys", create_key, "POST"),
    ("/admin/keys/{key_id}", revoke_key, "DELETE"),
)
