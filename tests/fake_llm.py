"""A scripted OpenAI-compatible chat endpoint for tests (stdlib, numpy and memplane's token counter).

`FakeLLM` serves `POST /v1/chat/completions` (and `/chat/completions`) on 127.0.0.1 with
a free port, from a daemon thread, answering with the real response shape of OpenAI's
Chat Completions API (id, object "chat.completion", created, model, choices[0].message,
finish_reason, usage). Replies are scripted: `fake.script("...", Delay(3, "..."),
HttpError(500), Respond(fn), ToolCalls((ToolCall("search", {"q": "x"}),)))` queues them,
one consumed per request (a `Respond` picks its reply from the request; `ToolCalls`
answers an assistant message with `tool_calls` [{id, type "function", function {name,
arguments}}], content null unless given, finish_reason "tool_calls"); with the queue
empty the server
answers HTTP 500 "no scripted reply", so a test that calls the model more often than it
scripted fails instead of passing silently. `fake.requests` holds every parsed request
body, so tests can check what was sent (prompt, language, previous summary,
response_format).

It also serves `POST /v1/embeddings` (and `/embeddings`) with OpenAI's response shape
(object "list", data[i] {object "embedding", index, embedding}, model, usage): each
input's vector is a deterministic function of its text (`FakeLLM.vector`), sent as
base64 little-endian float32 when the request asks `encoding_format="base64"`, else as
a float list — or always as floats with `floats_only=True`, like servers that ignore the
format. It refuses what OpenAI refuses (its API reference for `/v1/embeddings`), with
OpenAI's own HTTP 400 bodies: more than 2,048 inputs; an input of more than 8,192 tokens
("This model's maximum context length is 8192 tokens, however you requested N tokens
..."); more than 300,000 tokens summed over the inputs of one request ("Requested N
tokens, max 300000 tokens per request", type and code `max_tokens_per_request`). Tokens
are cl100k_base's (the tokenizer of text-embedding-3-* and ada-002), counted by the shared
counter `memplane.text.tokens`; `usage` reports them. `fake.embedding_requests` logs the
bodies; `fake.fail_embeddings(n, status)` makes the next n embedding calls answer HTTP
*status*.

Production code talks to it through its ordinary base URL (`fake.base_url`); nothing
in memplane knows it is a fake.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import numpy as np

from memplane.text.tokens import token_counter

_PATHS = ("/v1/chat/completions", "/chat/completions")
_EMBEDDING_PATHS = ("/v1/embeddings", "/embeddings")
# OpenAI's limits of /v1/embeddings (API reference, "Create embeddings": "The input must not
# exceed the max input tokens for the model (8192 tokens for all embedding models), cannot
# be an empty string, and any array must be 2048 dimensions or less. ... all embedding
# models enforce a maximum of 300,000 tokens summed across all inputs in a single request").
EMBEDDING_ENCODING = "cl100k_base"
MAX_EMBEDDING_INPUT_TOKENS = 8192
MAX_EMBEDDING_REQUEST_TOKENS = 300_000
MAX_EMBEDDING_INPUTS = 2048


@dataclass(frozen=True)
class Delay:
    """Answer *content* after *seconds* (to exceed a client's timeout). Closing the fake
    ends the wait at once, so a long delay never holds up shutdown."""

    seconds: float
    content: str = "{}"


@dataclass(frozen=True)
class HttpError:
    """Answer with HTTP *status* and *body* (an OpenAI-style error object when None), and
    *headers* (e.g. {"Retry-After": "1"} with a 429)."""

    status: int = 500
    body: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Respond:
    """Answer with what *reply(request body)* returns (a str, Delay or HttpError): a
    reply chosen by what was asked, e.g. by the prompt's text."""

    reply: Callable[[dict[str, Any]], str | Delay | HttpError | ToolCalls]


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asks for: *arguments* a JSON object (serialised as the
    API sends it, a string) or the raw argument string; *id* "" numbers it "call_<n>"."""

    name: str
    arguments: Mapping[str, Any] | str
    id: str = ""


@dataclass(frozen=True)
class ToolCalls:
    """Answer with an assistant message asking for *calls* (and *content*, null when
    None), finish_reason "tool_calls", as OpenAI's Chat Completions API does."""

    calls: tuple[ToolCall, ...]
    content: str | None = None


Reply = str | Delay | HttpError | Respond | ToolCalls


def error_body(message: str, error_type: str = "server_error") -> str:
    """An OpenAI-style error body: {"error": {"message", "type", "param", "code"}}."""
    return json.dumps({"error": {"message": message, "type": error_type, "param": None, "code": None}})


class FakeLLM:
    """The scripted endpoint; a context manager (`with FakeLLM() as fake:`)."""

    def __init__(self, model: str = "fake-model", *, embedding_dimensions: int = 16, floats_only: bool = False) -> None:
        """Starts serving at once on 127.0.0.1 and a free port."""
        self.model = model
        self.embedding_dimensions = embedding_dimensions
        self.floats_only = floats_only
        self.embedding_requests: list[dict[str, Any]] = []
        self._embedding_failures: deque[int] = deque()
        self.requests: list[dict[str, Any]] = []
        self.reject_json_schema = False  # answer 400 to response_format json_schema, as servers without it
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
            self.reject_json_schema = False

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

    def vector(self, text: str) -> np.ndarray:
        """The (not normalised) float32 vector served for *text*."""
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).normal(size=self.embedding_dimensions).astype(np.float32)

    def fail_embeddings(self, count: int, status: int = 500) -> None:
        """The next *count* embedding calls answer HTTP *status*."""
        with self._lock:
            self._embedding_failures.extend([status] * count)

    def heal_embeddings(self) -> None:
        """Forget the embedding failures still to come: the next call answers."""
        with self._lock:
            self._embedding_failures.clear()

    # -- called from handler threads ------------------------------------------------
    def _embeddings(self, body: dict[str, Any]) -> tuple[int, str]:
        with self._lock:
            self.embedding_requests.append(body)
            failure = self._embedding_failures.popleft() if self._embedding_failures else None
        if failure is not None:
            return failure, error_body("scripted embedding failure")
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return 400, error_body("input must be a string or a non-empty list of strings", "invalid_request_error")
        refused = _refused(texts)
        if refused is not None:
            return 400, refused
        as_base64 = body.get("encoding_format") == "base64" and not self.floats_only
        data = []
        for i, text in enumerate(texts):
            v = self.vector(text)
            encoded: Any = base64.b64encode(v.astype("<f4").tobytes()).decode() if as_base64 else v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens = sum(token_counter(EMBEDDING_ENCODING).count_texts(texts))
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return 200, json.dumps({"object": "list", "data": data, "model": body.get("model"), "usage": usage})

    def _next(self, body: dict[str, Any]) -> str | Delay | HttpError | ToolCalls | None:
        with self._lock:
            self.requests.append(body)
            fmt = body.get("response_format")
            if self.reject_json_schema and isinstance(fmt, dict) and fmt.get("type") == "json_schema":
                message = "response_format json_schema is not supported by this server"
                return HttpError(400, error_body(message, "invalid_request_error"))
            reply = self._replies.popleft() if self._replies else None
        return reply.reply(body) if isinstance(reply, Respond) else reply

    def _completion(self, content: str | None, body: dict[str, Any], calls: tuple[ToolCall, ...] = ()) -> str:
        prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{len(self.requests)}_{i}",
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for i, call in enumerate(calls)
            ]
        generated = len(content or "") + sum(len(c["function"]["arguments"]) for c in message.get("tool_calls", []))
        prompt_tokens, completion_tokens = prompt_chars // 4 + 1, generated // 4 + 1
        return json.dumps(
            {
                "id": f"chatcmpl-fake{len(self.requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model") or self.model),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": "tool_calls" if calls else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )


def _refused(texts: list[str]) -> str | None:
    """OpenAI's HTTP 400 body for *texts* past a limit of /v1/embeddings, None within them
    (the wording and error types of OpenAI's answers)."""
    if len(texts) > MAX_EMBEDDING_INPUTS:
        message = (
            "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference."
        )
        return error_body(message, "invalid_request_error")
    counts = token_counter(EMBEDDING_ENCODING).count_texts(texts)
    for n in counts:
        if n > MAX_EMBEDDING_INPUT_TOKENS:
            message = (
                f"This model's maximum context length is {MAX_EMBEDDING_INPUT_TOKENS} tokens, however you "
                f"requested {n} tokens ({n} in your prompt; 0 for the completion). Please reduce your prompt; "
                "or completion length."
            )
            return error_body(message, "invalid_request_error")
    if sum(counts) > MAX_EMBEDDING_REQUEST_TOKENS:
        message = f"Requested {sum(counts)} tokens, max {MAX_EMBEDDING_REQUEST_TOKENS} tokens per request"
        body = {"message": message, "type": "max_tokens_per_request", "param": None, "code": "max_tokens_per_request"}
        return json.dumps({"error": body})
    return None


def _handler_class(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            path = self.path.split("?", 1)[0]
            if path in _EMBEDDING_PATHS:
                try:
                    self._send(*fake._embeddings(json.loads(raw or b"{}")))
                except (json.JSONDecodeError, AttributeError):
                    self._send(400, error_body("request body is not a JSON object", "invalid_request_error"))
                return
            if path not in _PATHS:
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
                body_text = reply.body if reply.body is not None else error_body("scripted error")
                self._send(reply.status, body_text, reply.headers)
            elif isinstance(reply, Delay):
                if not fake._closing.wait(reply.seconds):
                    self._send(200, fake._completion(reply.content, body))
            elif isinstance(reply, ToolCalls):
                self._send(200, fake._completion(reply.content, body, reply.calls))
            else:
                self._send(200, fake._completion(reply, body))

        def _send(self, status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
            data = text.encode()
            try:
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (e.g. its timeout passed)
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: tests read `fake.requests` instead of an access log."""

    return Handler
