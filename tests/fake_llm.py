"""A scripted OpenAI-compatible chat endpoint for tests (stdlib only).

`FakeLLM` serves `POST /v1/chat/completions` (and `/chat/completions`) on 127.0.0.1 with
a free port, from a daemon thread, answering with the real response shape of OpenAI's
Chat Completions API (id, object "chat.completion", created, model, choices[0].message,
finish_reason, usage). Replies are scripted: `fake.script("...", Delay(3, "..."),
HttpError(500))` queues them, one consumed per request; with the queue empty the server
answers HTTP 500 "no scripted reply", so a test that calls the model more often than it
scripted fails instead of passing silently. `fake.requests` holds every parsed request
body, so tests can check what was sent (prompt, language, previous summary,
response_format).

Production code talks to it through its ordinary base URL (`fake.base_url`); nothing
in memplane knows it is a fake.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

_PATHS = ("/v1/chat/completions", "/chat/completions")


@dataclass(frozen=True)
class Delay:
    """Answer *content* after *seconds* (to exceed a client's timeout). Closing the fake
    ends the wait at once, so a long delay never holds up shutdown."""

    seconds: float
    content: str = "{}"


@dataclass(frozen=True)
class HttpError:
    """Answer with HTTP *status* and *body* (an OpenAI-style error object when None)."""

    status: int = 500
    body: str | None = None


Reply = str | Delay | HttpError


def error_body(message: str, error_type: str = "server_error") -> str:
    """An OpenAI-style error body: {"error": {"message", "type", "param", "code"}}."""
    return json.dumps({"error": {"message": message, "type": error_type, "param": None, "code": None}})


class FakeLLM:
    """The scripted endpoint; a context manager (`with FakeLLM() as fake:`)."""

    def __init__(self, model: str = "fake-model") -> None:
        """Starts serving at once on 127.0.0.1 and a free port."""
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self._server.daemon_threads = True  # a handler still waiting never blocks close()
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-llm", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port listened on."""
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """ "http://127.0.0.1:<port>/v1", as given to an OpenAI client."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue replies, consumed one per request in order."""
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        with self._lock:
            return len(self._replies)

    def reset(self) -> None:
        """Forget the script and the request log (between tests sharing one endpoint)."""
        with self._lock:
            self._replies.clear()
            self.requests.clear()

    def close(self) -> None:
        """Stop serving (wakes any handler waiting in a `Delay`)."""
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLM:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- called from handler threads ------------------------------------------------
    def _next(self, body: dict[str, Any]) -> Reply | None:
        with self._lock:
            self.requests.append(body)
            return self._replies.popleft() if self._replies else None

    def _completion(self, content: str, body: dict[str, Any]) -> str:
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        prompt_tokens, completion_tokens = prompt_chars // 4 + 1, len(content) // 4 + 1
        return json.dumps(
            {
                "id": f"chatcmpl-fake{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model") or self.model),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )


def _handler_class(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path.split("?", 1)[0] not in _PATHS:
                self._send(404, error_body(f"unknown path {self.path}", "invalid_request_error"))
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._send(400, error_body("request body is not JSON", "invalid_request_error"))
                return
            reply = fake._next(body if isinstance(body, dict) else {"_raw": body})
            if reply is None:
                self._send(500, error_body("no scripted reply"))
            elif isinstance(reply, HttpError):
                self._send(reply.status, reply.body if reply.body is not None else error_body("scripted error"))
            elif isinstance(reply, Delay):
                if not fake._closing.wait(reply.seconds):
                    self._send(200, fake._completion(reply.content, body))
            else:
                self._send(200, fake._completion(reply, body))

        def _send(self, status: int, text: str) -> None:
            data = text.encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (e.g. its timeout passed)
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: tests read `fake.requests` instead of an access log."""

    return Handler
