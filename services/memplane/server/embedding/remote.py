"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (its wire format over
aiohttp, retried as the openai SDK retries: `memplane.server.embedding.endpoint`).

Vectors are asked for as base64 (`encoding_format="base64"`: little-endian float32, 4
bytes a dimension, as OpenAI's API documents it) and decoded with numpy, a third of the
bytes of the JSON float lists and no per-float parsing or validation. A server that
ignores the format and answers float lists is read too.

What is sent stays within OpenAI's limits of `/v1/embeddings` (its API reference, "Create
embeddings"), which the endpoint enforces with HTTP 400: each input is cut to its head of
at most *max_input_tokens* cl100k_base tokens (the tokenizer of text-embedding-3-* and
ada-002; `memplane.server.embedding.head`, counted by the shared `memplane.text.tokens`), and
the inputs are split into requests of at most MAX_REQUEST_INPUTS inputs and
MAX_REQUEST_TOKENS tokens summed. The lexical index still holds the whole text
(docs/explanation/retrieval.md#long-memories).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

import numpy as np

from memplane.errors import FailedPreconditionError, UnavailableError
from memplane.server.embedding.base import normalize
from memplane.server.embedding.endpoint import EndpointError, JsonEndpoint
from memplane.server.embedding.head import head
from memplane.server.embedding.health import EndpointHealth
from memplane.text.tokens import token_counter

# OpenAI's API reference, "Create embeddings": "The input must not exceed the max input
# tokens for the model (8192 tokens for all embedding models) ... and any array must be
# 2048 dimensions or less ... all embedding models enforce a maximum of 300,000 tokens
# summed across all inputs in a single request". ada-002's model card said 8,191 tokens;
# the default head keeps one under the documented 8,192.
ENDPOINT_ENCODING = "cl100k_base"
DEFAULT_MAX_INPUT_TOKENS = 8191
MAX_REQUEST_TOKENS = 300_000
MAX_REQUEST_INPUTS = 2048
# cl100k_base is a byte-level BPE: a token is at least one UTF-8 byte, a character at most 4.
MAX_TOKENS_PER_CHAR = 4

# Failures that say the endpoint is unreachable or overloaded (after the retries): no
# answer, a 429 or a 5xx status: UNAVAILABLE. Other 4xx answers are the request's fault, not
# the endpoint's: a wrong key (401/403), an unknown model (404), an input it will not take
# (400; what memplane sends stays within OpenAI's documented limits, above). No retry can
# help, so they are FAILED_PRECONDITION (`_refusal`), naming the status and the endpoint's
# message (cut to _DETAIL_CHARS), and leave the endpoint's health alone.
_DETAIL_CHARS = 300


def _refusal(status: int) -> bool:
    """A 4xx answer no retry can change: not 408 (timeout), 409 (conflict) or 429 (rate
    limit), which are retried as transient (`memplane.server.embedding.endpoint`)."""
    return 400 <= status < 500 and status not in (408, 409, 429)


class OpenAIEmbedder:
    """Calls `embeddings.create` with the head of each text (at most *max_input_tokens*
    cl100k_base tokens; 0: the whole text), in requests of at most *batch_size* (and
    MAX_REQUEST_INPUTS) inputs and MAX_REQUEST_TOKENS tokens; vectors are re-normalised.

    Construct with `await OpenAIEmbedder.connect(...)`, which asks the endpoint once for
    the dimension unless *dimensions* is given. Endpoint failures raise `UnavailableError`,
    its refusals (a 4xx no retry changes) `FailedPreconditionError`.
    """

    def __init__(
        self,
        client: JsonEndpoint,
        model: str,
        dimensions: int,
        batch_size: int,
        max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
    ) -> None:
        self._client = client
        self._model = model
        self._dims = dimensions
        self._batch_size = min(batch_size, MAX_REQUEST_INPUTS)
        self._max_input_tokens = max_input_tokens
        self._counter = token_counter(ENDPOINT_ENCODING)
        self.health = EndpointHealth(lambda: self._call(["health probe"]), closing=client.close)
        """Whether the endpoint answers (`memplane.server.embedding.health`): the health service's view."""

    @classmethod
    async def connect(
        cls,
        *,
        base_url: str | None,
        api_key: str,
        model: str,
        dimensions: int | None,
        batch_size: int = 64,
        timeout_seconds: float = 30.0,
        max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS,
    ) -> OpenAIEmbedder:
        """Create the client and learn the dimension (one probe call if not given)."""
        client = JsonEndpoint(base_url, api_key, timeout_seconds=timeout_seconds, max_retries=2)
        embedder = cls(client, model, dimensions or 0, batch_size, max_input_tokens)
        if not dimensions:
            probe = await embedder._call(["dimension probe"])
            embedder._dims = int(probe.shape[1])
        return embedder

    async def close(self) -> None:
        """Stop the health probe and close the HTTP session."""
        await self.health.close()

    @property
    def model_id(self) -> str:
        return f"openai/{self._model}"

    @property
    def dimensions(self) -> int:
        return self._dims

    async def _call(self, texts: list[str]) -> np.ndarray:
        try:
            reply = await self._client.post(
                "embeddings", {"model": self._model, "input": texts, "encoding_format": "base64"}
            )
        except EndpointError as exc:
            if _refusal(exc.status):
                raise FailedPreconditionError(
                    f"embedding endpoint refused the request ({exc.status}): {exc.reason[:_DETAIL_CHARS]}"
                ) from exc
            self.health.lost(str(exc)[:_DETAIL_CHARS])
            raise UnavailableError(f"embedding endpoint failed: {str(exc)[:_DETAIL_CHARS]}") from exc
        try:
            ordered = sorted(reply["data"], key=lambda d: int(d["index"]))
            embeddings = [d["embedding"] for d in ordered]
        except (TypeError, KeyError, ValueError) as exc:
            raise UnavailableError(f"embedding endpoint returned no list of embeddings: {exc!r}") from exc
        if len(embeddings) != len(texts):
            raise UnavailableError(f"embedding endpoint returned {len(embeddings)} vectors for {len(texts)} texts")
        rows = [_decode(e) for e in embeddings]
        if len({r.shape[0] for r in rows}) != 1 or rows[0].shape[0] == 0:
            raise UnavailableError("embedding endpoint returned vectors of differing or zero length")
        return normalize(np.vstack(rows))

    def head(self, text: str, *, query: bool = False) -> str:
        """The part of *text* sent to the endpoint (as a query or a document alike): *text*
        itself, or its head of at most max_input_tokens cl100k_base tokens (ending at a
        word where one is near)."""
        return head(text, self._max_input_tokens, self._counter.count_text, max_tokens_per_char=MAX_TOKENS_PER_CHAR)

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        sent = list(texts)
        if not sent:
            return np.empty((0, self._dims), dtype=np.float32)
        # A cl100k_base token is at least one UTF-8 byte, so texts within the limits by bytes
        # are within them by tokens: one request, nothing cut, no tokenizer pass (a query).
        sizes = [len(t.encode()) for t in sent]
        whole = self._max_input_tokens <= 0 or max(sizes) <= self._max_input_tokens
        if whole and len(sent) <= self._batch_size and sum(sizes) <= MAX_REQUEST_TOKENS:
            return await self._call(sent)
        counts = self._counter.count_texts(sent)
        for i, n in enumerate(counts):
            if 0 < self._max_input_tokens < n:
                sent[i] = self.head(sent[i])
                counts[i] = self._counter.count_text(sent[i])
        ranges = _requests(counts, self._batch_size, MAX_REQUEST_TOKENS)
        return np.vstack([await self._call(sent[start:end]) for start, end in ranges])

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(texts)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(texts)


def _requests(counts: Sequence[int], max_inputs: int, max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive [start, end) ranges of inputs with token *counts*: each of at most
    *max_inputs* inputs and *max_tokens* tokens summed (an input over *max_tokens* alone
    in its range), greedily in order."""
    ranges: list[tuple[int, int]] = []
    start, tokens = 0, 0
    for i, n in enumerate(counts):
        if i > start and (i - start == max_inputs or tokens + n > max_tokens):
            ranges.append((start, i))
            start, tokens = i, 0
        tokens += n
    if start < len(counts):
        ranges.append((start, len(counts)))
    return ranges


def _decode(embedding: object) -> np.ndarray:
    """One vector from a base64 string (float32, little-endian) or a list of floats (a
    server that ignored encoding_format). Raises `UnavailableError` on anything else."""
    try:
        if isinstance(embedding, str):
            return np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4").astype(np.float32)
        return np.asarray(embedding, dtype=np.float32).reshape(-1)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise UnavailableError(f"embedding endpoint returned an unreadable vector: {exc}") from exc
