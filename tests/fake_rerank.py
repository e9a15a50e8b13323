"""A loopback rerank endpoint for tests (stdlib only), speaking two real wire protocols.

`FakeReranker` serves, on 127.0.0.1 with a free port from a daemon thread:
- ``POST /v1/rerank`` and ``/v2/rerank``: Cohere's (and Jina's) protocol, request
  {model, query, documents: [str], top_n} -> {id, results: [{index, relevance_score}]
  best first, at most top_n, meta}; a body without `query` or `documents` is HTTP 400;
- ``POST /rerank``: Hugging Face text-embeddings-inference's, request {query, texts:
  [str], ...} -> [{index, score}] best first; a body without `texts` is HTTP 422.

A document's score is that of the first key of `fake.scores` ({substring: score}) it
contains, else 0.0, so a test decides the order. `fake.fail(status)` answers every call
with HTTP *status*; `fake.hang()` makes every call wait (server side, on an Event) until
`reset` or `close`, so a client's timeout is what ends it; `fake.malformed()` answers 200
with results missing. `fake.requests` logs (path, headers, body) of every call.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

_COHERE_PATHS = ("/v1/rerank", "/v2/rerank")
_TEI_PATH = "/rerank"


class FakeReranker:
    """The endpoint; use as a context manager or call `close`."""

    def __init__(self) -> None:
        self.scores: dict[str, float] = {}
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self._status = 200
        self._malformed = False
        self._hanging = False
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-rerank", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:<port> (append a protocol's path)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(self, status: int) -> None:
        """Answer every call with HTTP *status* until `reset`."""
        self._status = status

    def hang(self) -> None:
        """Hold every call without an answer until `reset` or `close`."""
        self._release.clear()
        self._hanging = True

    def malformed(self) -> None:
        """Answer 200 with a body missing every result, until `reset`."""
        self._malformed = True

    def reset(self) -> None:
        """Release held calls; forget scores, failures and the request log."""
        self._hanging = False
        self._release.set()
        self._status = 200
        self._malformed = False
        with self._lock:
            self.scores = {}
            self.requests.clear()

    def score(self, document: str) -> float:
        """The scripted relevance of *document*."""
        return next((s for key, s in self.scores.items() if key in document), 0.0)

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, Any]:
        """(HTTP status, JSON reply) of one call."""
        with self._lock:
            self.requests.append((path, headers, body))
        if self._hanging:
            self._release.wait()
        if self._status != 200:
            return self._status, {"message": f"scripted failure {self._status}"}
        tei = path == _TEI_PATH
        documents = body.get("texts" if tei else "documents")
        if not isinstance(body.get("query"), str) or not isinstance(documents, list):
            return (422, {"error": "texts missing"}) if tei else (400, {"message": "query and documents required"})
        ranked = sorted(range(len(documents)), key=lambda i: -self.score(str(documents[i])))
        if tei:
            return 200, ([] if self._malformed else [{"index": i, "score": self.score(documents[i])} for i in ranked])
        top_n = body.get("top_n") or len(documents)
        results = [{"index": i, "relevance_score": self.score(documents[i])} for i in ranked[:top_n]]
        return 200, {
            "id": str(uuid.uuid4()),
            "results": [] if self._malformed else results,
            "meta": {"billed_units": {"search_units": 1}},
        }

    def close(self) -> None:
        """Stop serving (releases any held call)."""
        self._release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeReranker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _handler_class(fake: FakeReranker) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path not in (*_COHERE_PATHS, _TEI_PATH):
                self._send(404, {"message": f"no route {self.path}"})
                return
            length = int(self.headers.get("Content-Length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._send(400, {"message": "body is not JSON"})
                return
            status, reply = fake.answer(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            self._send(status, reply)

        def _send(self, status: int, reply: Any) -> None:
            data = json.dumps(reply).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout) before the answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
