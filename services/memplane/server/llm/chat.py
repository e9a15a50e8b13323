"""An OpenAI-compatible chat model (OpenAI, vLLM, llama.cpp, Ollama, SGLang, LiteLLM,
DashScope's compatible mode, ...) through the `openai` package.

- Structured output: with a JSON schema the request asks for
  `response_format={"type": "json_schema", ...}` (OpenAI, vLLM, SGLang, recent Ollama);
  a server that answers 400 naming `response_format` / `json_schema` is asked again in
  JSON mode (`{"type": "json_object"}`), and the model is remembered as such for this
  process (mode "auto"). Mode "json_object" never sends a schema, "none" no
  response_format at all (servers that reject both); the prompt always says the shape.
- Timeouts: each attempt is bounded by `timeout_seconds`.
- Retries: a timeout, an unreachable endpoint, HTTP 408 / 409 / 429 / 5xx are retried up
  to `max_retries` times, waiting 0.5 s doubling to 8 s (the openai client's own
  schedule), or the server's Retry-After when it sends one (capped at 30 s).
- Per workspace: `workspace_models` maps a workspace name to the model it uses, and
  every call first takes a token from the workspace's `LLMRateLimiter` bucket.

Every failure is an `LLMError` with a short reason ("timeout after 5.0 s", "HTTP 500 from
the LLM endpoint: ..."). Message text is never logged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import openai
from openai import AsyncOpenAI

from memplane.domain.models import Workspace
from memplane.server.llm.rate import LLMRateLimiter

_log = logging.getLogger(__name__)

OutputMode = Literal["auto", "json_schema", "json_object", "none"]

BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 8.0
RETRY_AFTER_MAX_SECONDS = 30.0
_RETRIED_STATUS = frozenset({408, 409, 429})
_ERROR_DETAIL_CHARS = 200


class LLMError(Exception):
    """A chat call failed; `reason` is short and human, e.g. "timeout after 5.0 s",
    "HTTP 500 from the LLM endpoint: ...", "answer has no {"memories": [...]} object"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Completion:
    """One answer: its text, the model that wrote it, token usage (0 when the server
    sends none) and the response_format actually used ("json_schema", "json_object",
    "none")."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    output: str


@dataclass(frozen=True)
class _Transient(Exception):  # noqa: N818 - internal signal, never escapes
    error: LLMError
    retry_after: float | None = None


class ChatModel:
    """One OpenAI-compatible endpoint behind an `AsyncOpenAI` client (one HTTP connection
    pool; close it with `close()`)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout_seconds: float,
        max_retries: int = 0,
        temperature: float | None = 0.2,
        output_mode: OutputMode = "auto",
        workspace_models: Mapping[str, str] | None = None,
        rate_limiter: LLMRateLimiter | None = None,
    ) -> None:
        """*base_url* ends where OpenAI's ends ("http://vllm:8000/v1"); an empty
        *api_key* is sent as "unused" (local servers need none; the environment is never
        read). *timeout_seconds* bounds one attempt; *max_retries* more attempts follow a
        transient failure. *temperature* None leaves it to the server (some reasoning
        models accept only their default). No I/O here."""
        self.model = model
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        self._temperature = temperature
        self._mode = output_mode
        self._no_schema: set[str] = set()  # models whose server refused json_schema (mode "auto")
        self._workspace_models = dict(workspace_models or {})
        self._limiter = rate_limiter
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout_seconds, max_retries=0
        )

    def model_for(self, workspace: Workspace | None) -> str:
        """The model a workspace's calls use: its `workspace_models` entry, else the default."""
        if workspace is None:
            return self.model
        return self._workspace_models.get(workspace.name, self.model)

    async def complete(self, messages: list[dict[str, str]], *, json_mode: bool) -> str:
        """The answer's text to *messages* (`{"role", "content"}` dicts); with *json_mode*
        the request asks for a JSON object. Raises `LLMError` (see `chat`)."""
        return (await self.chat(messages, json_mode=json_mode)).text

    async def chat(
        self,
        messages: list[dict[str, str]],
        *,
        json_mode: bool,
        schema: Mapping[str, Any] | None = None,
        schema_name: str = "answer",
        workspace: Workspace | None = None,
    ) -> Completion:
        """One answer to *messages*, retried on transient failures. With *json_mode* the
        answer is asked as JSON: by *schema* (a JSON Schema object) where the server
        supports it, in JSON mode otherwise (module docstring). *workspace* picks the
        model and the rate-limit bucket.

        Raises `QuotaExceededError` when the workspace's LLM rate limit would make the
        call wait longer than the limiter allows; `LLMError`: "timeout after <t> s";
        "HTTP <status> from the LLM endpoint: <message>"; "cannot reach the LLM endpoint
        (<cause>)"; "empty answer from the LLM"; "answer cut off at the model's token
        limit" (JSON); "the LLM refused: <refusal>"; "bad response from the LLM endpoint:
        ..." (a body that is not JSON or has no choices).
        """
        model = self.model_for(workspace)
        if self._limiter is not None and workspace is not None:
            await self._limiter.acquire(workspace)
        output = self._output(model, json_mode, schema)
        attempt = 0
        while True:
            try:
                return await self._attempt(messages, model, output, schema, schema_name)
            except _Transient as transient:
                if attempt >= self.max_retries:
                    raise transient.error from None
                wait = min(BACKOFF_FIRST_SECONDS * 2**attempt, BACKOFF_MAX_SECONDS)
                if transient.retry_after is not None:
                    wait = min(max(transient.retry_after, 0.0), RETRY_AFTER_MAX_SECONDS)
                _log.info("LLM call failed (%s); retry %d in %.2f s", transient.error.reason, attempt + 1, wait)
                await asyncio.sleep(wait)
                attempt += 1
            except openai.BadRequestError as exc:
                if output != "json_schema" or not _refuses_schema(exc):
                    raise LLMError(f"HTTP 400 from the LLM endpoint{_detail(exc)}") from None
                _log.info("model %s: the endpoint refused json_schema; using JSON mode", model)
                self._no_schema.add(model)
                output = "json_object"

    def _output(self, model: str, json_mode: bool, schema: Mapping[str, Any] | None) -> str:
        if not json_mode or self._mode == "none":
            return "none"
        if schema is not None and self._mode in ("auto", "json_schema") and model not in self._no_schema:
            return "json_schema"
        return "json_object"

    async def _attempt(
        self,
        messages: list[dict[str, str]],
        model: str,
        output: str,
        schema: Mapping[str, Any] | None,
        schema_name: str,
    ) -> Completion:
        extra: dict[str, Any] = {}
        if output == "json_schema":
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": dict(schema or {}), "strict": False},
            }
        elif output == "json_object":
            extra["response_format"] = {"type": "json_object"}
        if self._temperature is not None:
            extra["temperature"] = self._temperature
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout_seconds):
                response = await self._client.chat.completions.create(
                    model=model, messages=cast(Any, messages), **extra
                )
        except (TimeoutError, openai.APITimeoutError):
            raise _Transient(LLMError(f"timeout after {self.timeout_seconds:.1f} s")) from None
        except openai.BadRequestError:
            raise
        except openai.APIStatusError as exc:
            error = LLMError(f"HTTP {exc.status_code} from the LLM endpoint{_detail(exc)}")
            if exc.status_code in _RETRIED_STATUS or exc.status_code >= 500:
                raise _Transient(error, _retry_after(exc)) from None
            raise error from None
        except openai.APIConnectionError as exc:
            cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "connection error"
            raise _Transient(LLMError(f"cannot reach the LLM endpoint ({cause})")) from None
        except openai.OpenAIError as exc:
            raise LLMError(f"bad response from the LLM endpoint: {short(str(exc))}") from None
        except ValueError:  # a 200 whose body is not JSON escapes openai as JSONDecodeError
            raise LLMError("bad response from the LLM endpoint: body is not JSON") from None
        return _completion(response, model, output, messages, started)

    async def close(self) -> None:
        """Close the HTTP connection pool. Idempotent."""
        await self._client.close()


def _completion(response: Any, model: str, output: str, messages: list[dict[str, str]], started: float) -> Completion:
    """The `Completion` in a chat response, or `LLMError` for a refusal, a filtered,
    empty or (JSON) cut-off answer, or a body without choices[0].message."""
    usage = getattr(response, "usage", None)
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    _log.debug(
        "chat completion: model %s, %d messages, %.2f s, %d prompt / %d completion tokens",
        model,
        len(messages),
        time.perf_counter() - started,
        prompt_tokens,
        completion_tokens,
    )
    try:  # openai builds responses without validation: a non-conforming server gives gaps
        choice = response.choices[0]
        content, refusal, finish_reason = choice.message.content, choice.message.refusal, choice.finish_reason
    except (AttributeError, IndexError, TypeError):
        raise LLMError("bad response from the LLM endpoint: no choices[0].message") from None
    if refusal:
        raise LLMError(f"the LLM refused: {short(refusal)}")
    if finish_reason == "content_filter":
        raise LLMError("the LLM's answer was stopped by its content filter")
    if not isinstance(content, str) or not content.strip():
        raise LLMError("empty answer from the LLM")
    if output != "none" and finish_reason == "length":
        raise LLMError("answer cut off at the model's token limit")
    return Completion(
        text=content,
        model=str(getattr(response, "model", None) or model),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        output=output,
    )


def _refuses_schema(exc: openai.BadRequestError) -> bool:
    """Whether a 400 says the server does not do json_schema (vLLM, llama.cpp and
    Ollama name `response_format` or `json_schema` in the message)."""
    text = f"{_detail(exc)} {exc.message}".lower()
    return "response_format" in text or "json_schema" in text or "response format" in text


def _retry_after(exc: openai.APIStatusError) -> float | None:
    """Seconds of the response's Retry-After header (delta-seconds only), or None."""
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def _detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    message: Any = None
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
    text = short(str(message)) if message else ""
    return f": {text}" if text else ""


def short(text: str) -> str:
    """*text* on one line, at most 200 characters (for error reasons)."""
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_DETAIL_CHARS else text[: _ERROR_DETAIL_CHARS - 1] + "…"
