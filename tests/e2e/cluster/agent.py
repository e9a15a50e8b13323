"""An agent, as a Pod runs it: the MemoryWorkspace's Secret mounted with envFrom, the client SDK
built by `AsyncMemplaneClient.from_env()`, the services reached by their Service DNS names.

Run inside the memplane image (`python /agent/agent.py MODE ...`, the file mounted from a
ConfigMap). Each mode prints one JSON line prefixed with ``RESULT `` to stdout; the test reads it
from the Pod's log. Stdlib and memplane only.

Modes:
  roundtrip TEXT        add TEXT as a memory, search for it; {"id", "hits": [contents]}
  search QUERY          search only; {"hits": [contents]}
  probe SECONDS         one health check, waiting up to SECONDS for a connection; {"ok", "code"}
  qps SECONDS CLIENTS   CLIENTS closed-loop searchers for SECONDS (a new query each time, so
                        each is embedded); {"searches", "failed", "seconds"}
  console URL           a person at the console: sign in at URL with the Secret's key, list the
                        memories over HTTP; {"signed_in", "contents"}
  load STOP_FILE PERIOD add + search every PERIOD seconds until STOP_FILE exists; prints
                        ``STARTED`` once the first pair succeeded, then
                        {"calls", "failed", "errors": [code: message, ...], "max_latency_s"}
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import os
import sys
import time
import urllib.request
from urllib.parse import urlsplit

from memplane.client import AsyncMemplaneClient
from memplane.errors import MemplaneError
from memplane.v1 import memory_pb2


def _result(payload: object) -> None:
    print("RESULT " + json.dumps(payload), flush=True)


async def roundtrip(client: AsyncMemplaneClient, text: str) -> None:
    added = await client.add_memories([memory_pb2.MemoryInput(content=text)])
    reply = await client.search(text, top_k=5)
    _result({"id": added[0].id, "hits": [h.memory.content for h in reply.hits]})


async def search(client: AsyncMemplaneClient, query: str) -> None:
    reply = await client.search(query, top_k=5)
    _result({"hits": [h.memory.content for h in reply.hits]})


async def load(client: AsyncMemplaneClient, stop_file: str, period: float) -> None:
    calls = failed = 0
    errors: list[str] = []
    worst = 0.0
    started = False
    n = 0
    while not await asyncio.to_thread(os.path.exists, stop_file):
        n += 1
        for call in ("add", "search"):
            t0 = time.monotonic()
            calls += 1
            try:
                if call == "add":
                    await client.add_memories([memory_pb2.MemoryInput(content=f"load note {n} about the upgrade")])
                else:
                    await client.search(f"note {n} upgrade", top_k=3)
            except MemplaneError as e:
                failed += 1
                errors.append(f"{call} #{n}: {type(e).__name__}: {e}"[:300])
            worst = max(worst, time.monotonic() - t0)
        if not started and failed == 0:
            print("STARTED", flush=True)
            started = True
        await asyncio.sleep(period)
    _result({"calls": calls, "failed": failed, "errors": errors[:20], "max_latency_s": round(worst, 3)})


async def probe(seconds: float) -> None:
    async with AsyncMemplaneClient.from_env(timeout=seconds) as client:
        try:  # waiting for the server: a new Pod is admitted by the policy agent a moment after it starts
            await client.check_health(wait_for_ready=True)
        except MemplaneError as e:
            _result({"ok": False, "code": type(e).__name__, "message": str(e)[:300]})
        else:
            _result({"ok": True, "code": "OK"})


async def qps(client: AsyncMemplaneClient, seconds: float, clients: int) -> None:
    done = failed = 0
    deadline = time.monotonic() + seconds

    async def searcher(k: int) -> None:
        nonlocal done, failed
        n = 0
        while time.monotonic() < deadline:
            n += 1
            try:
                await client.search(f"what did client {k} note about item {n}?", top_k=10)
                done += 1
            except MemplaneError:
                failed += 1

    started = time.monotonic()
    await asyncio.gather(*(searcher(k) for k in range(clients)))
    _result({"searches": done, "failed": failed, "seconds": round(time.monotonic() - started, 3)})


def console(url: str) -> None:
    """Sign in to the console at *url* (same origin, as its page does), list the memories."""
    parts = urlsplit(url)
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    sign_in = urllib.request.Request(  # noqa: S310 - the console Service's http URL, given by the test
        url + "api/session",
        data=json.dumps({"api_key": os.environ["MEMPLANE_API_KEY"]}).encode(),
        headers={"content-type": "application/json", "origin": f"{parts.scheme}://{parts.netloc}"},
        method="POST",
    )
    with opener.open(sign_in, timeout=60) as reply:
        signed = json.load(reply)
    with opener.open(url + "api/memories", timeout=60) as reply:
        listed = json.load(reply)
    _result({"signed_in": bool(signed.get("csrf_token")), "contents": [m["content"] for m in listed["memories"]]})


async def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "probe":
        await probe(float(args[0]))
        return
    if mode == "console":
        console(args[0])
        return
    async with AsyncMemplaneClient.from_env() as client:
        await client.check_health(wait_for_ready=True)
        if mode == "roundtrip":
            await roundtrip(client, args[0])
        elif mode == "search":
            await search(client, args[0])
        elif mode == "qps":
            await qps(client, float(args[0]), int(args[1]))
        elif mode == "load":
            await load(client, args[0], float(args[1]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
