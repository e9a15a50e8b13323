"""One OpenAI-compatible JSON POST (`/v1/embeddings`) over aiohttp, retried as the openai
SDK retries it.

The openai SDK spends ~1.0 ms of CPU on every call (building the request through its
type transforms, httpx, parsing the reply into pydantic models); aiohttp spends ~0.19 ms
on the same call (`bench/embedding_client.py`). A search embeds its query on every call, so
that millisecond was a tenth of a search's time on the user's path (issue 31). The wire
format is OpenAI's own ("Create embeddings" in its API reference); what the SDK added
besides, its retry policy, is kept here: `max_retries` more tries after a connection
error, a timeout, HTTP 408, 409, 429 or 5xx (or whatever `x-should-retry` says), waiting
min(0.5 s * 2^n, 8 s) less up to 25 % jitter, or the answer's `Retry-After` when that is
at most 60 s (openai-python `_base_client._calculate_retry_timeout`, `_should_retry`).
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from typing import Any

import aiohttp

# openai-python's _constants: INITIAL_RETRY_DELAY, MAX_RETRY_DELAY; MAX_RETRY_AFTER_DELAY
# is `_should_retry`'s bound on an honoured Retry-After.
INITIAL_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 8.0
MAX_RETRY_AFTER_SECONDS = 60.0
DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class EndpointError(Exception):
    """The last try failed. *status* 0: no answer (*reason* names the connection error or
    timeout); otherwise the HTTP status and the endpoint's message (its `error.message`,
    or the body's head)."""

    status: int
    reason: str

    def __str__(self) -> str:
        return f"{self.status} {self.reason}" if self.status else self.reason


def _retryable(status: int, headers: Any) -> bool:
    said = headers.get("x-should-retry")
    if said in ("true", "false"):
        return bool(said == "true")
    return status in (408, 409, 429) or status >= 500


def _retry_after(headers: Any) -> float | None:
    """Seconds the answer asks to wait (`retry-after-ms`, or `retry-after` in seconds), if
    within MAX_RETRY_AFTER_SECONDS."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            seconds = float(headers.get(name, "")) * scale
        except ValueError:
            continue
        if 0 <= seconds <= MAX_RETRY_AFTER_SECONDS:
            return seconds
    return None


def _message(body: str) -> str:
    """The endpoint's own words: OpenAI's `{"error": {"message": …}}`, or the body itself."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body.strip()
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return body.strip()


class JsonEndpoint:
    """POSTs JSON to `{base_url}/{path}` with `Authorization: Bearer <api_key>`; one
    keep-alive session, opened on first use (it must be made on the serving loop) and
    closed by `close()`. *timeout_seconds* bounds each try."""

    def __init__(self, base_url: str | None, api_key: str, *, timeout_seconds: float, max_retries: int = 2) -> None:
        self._base = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._max_retries = max_retries
        self._session: aiohttp.ClientSession | None = None

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        """The decoded JSON answer of a 2xx. Raises `EndpointError` once the tries are spent,
        or at once for an answer no retry changes (a 4xx other than 408, 409 and 429)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        url = f"{self._base}/{path}"
        attempt = 0
        while True:
            wait: float | None = None
            try:
                async with self._session.post(url, json=body) as answer:
                    if answer.status < 300:
                        return await answer.json(content_type=None)
                    failure = EndpointError(answer.status, _message(await answer.text()))
                    if not _retryable(answer.status, answer.headers):
                        raise failure
                    wait = _retry_after(answer.headers)
            except (aiohttp.ClientError, TimeoutError) as exc:
                failure = EndpointError(0, f"{type(exc).__name__}: {exc}".rstrip(": "))
            if attempt >= self._max_retries:
                raise failure
            if wait is None:
                wait = min(INITIAL_RETRY_SECONDS * 2**attempt, MAX_RETRY_SECONDS)
                wait *= 1 - 0.25 * random.random()  # noqa: S311 - jitter, not crypto
            attempt += 1
            await asyncio.sleep(wait)  # backoff before the next try, not a synchronisation

    async def close(self) -> None:
        """Close the session (its pooled connections)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
