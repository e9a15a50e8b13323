"""The JSON-lines protocol between bench/peers.py and a peer's worker (run by the peer's own
virtualenv's python, so none of the peer's dependencies enters memplane's).

One request a line on stdin, one reply a line on stdout, matched by "id"; requests run
concurrently (the bench's closed-loop clients keep several in flight), replies come back
as they finish:
  {"id": 0, "op": "init", "config": {...}}                       -> {"id": 0, "ok": true, "info": "..."}
  {"id": n, "op": "add", "user": u, "items": [{"text": t, "key": k}, ...]}   one call of the peer's add
  {"id": n, "op": "search", "user": u, "query": q, "top_k": 10, "mode": m}  -> {"keys": [k, ...]}
  {"id": n, "op": "close"}                                        -> the worker answers and exits
A failure answers {"id": n, "ok": false, "error": "..."}. Only this module's stdlib is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def run(handler: Handler, *, threads: int = 32) -> None:
    """Serve requests with *handler* (an async function of the request, its reply) until
    "close" or the end of stdin. Whatever the peer prints goes to stderr, not the channel."""
    channel = sys.stdout
    sys.stdout = sys.stderr  # a peer's prints must not corrupt the replies
    lock = threading.Lock()

    def reply(message: dict[str, Any]) -> None:
        line = json.dumps(message) + "\n"
        with lock:
            channel.write(line)
            channel.flush()

    async def one(request: dict[str, Any]) -> None:
        try:
            answer = await handler(request)
            reply({"id": request.get("id"), "ok": True, **answer})
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            reply({"id": request.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(threads))
        reader = ThreadPoolExecutor(1)
        tasks: set[asyncio.Task[None]] = set()
        while True:
            line = await loop.run_in_executor(reader, sys.stdin.readline)
            if not line:
                break
            request = json.loads(line)
            if request.get("op") == "close":
                if tasks:
                    await asyncio.gather(*tasks)
                with contextlib.suppress(Exception):
                    await handler(request)
                reply({"id": request.get("id"), "ok": True})
                break
            task = asyncio.create_task(one(request))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    asyncio.run(main())
