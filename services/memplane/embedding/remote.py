"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (the `openai` client).

Vectors are asked for as base64 (`encoding_format="base64"`: little-endian float32, 4
bytes a dimension, as OpenAI's API documents it) and decoded with numpy, a third of the
bytes of the JSON float lists and no per-float parsing or validation. A server that
ignores the format and answers float lists is read too.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

import numpy as np
import openai

from memplane.embedding.base import normalize
from memplane.embedding.health import EndpointHealth
from memplane.errors import UnavailableError

# Failures that say the endpoint is unreachable or overloaded (after the client's retries);
# a 5xx status is one too. Other 4xx answers are the request's fault, not the endpoint's.
_ENDPOINT_DOWN = (openai.APIConnectionError, openai.RateLimitError)


class OpenAIEmbedder:
    """Calls `embeddings.create` in batches of *batch_size*; vectors are re-normalised.

    Construct with `await OpenAIEmbedder.connect(...)`, which asks the endpoint once for
    the dimension unless *dimensions* is given. Endpoint failures raise `UnavailableError`.
    """

    def __init__(self, client: openai.AsyncOpenAI, model: str, dimensions: int, batch_size: int) -> None:
        self._client = client
        self._model = model
        self._dims = dimensions
        self._batch_size = batch_size
        self.health = EndpointHealth(lambda: self._call(["health probe"]))
        """Whether the endpoint answers (`memplane.embedding.health`): the health service's view."""

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
    ) -> OpenAIEmbedder:
        """Create the client and learn the dimension (one probe call if not given)."""
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout_seconds, max_retries=2)
        embedder = cls(client, model, dimensions or 0, batch_size)
        if not dimensions:
            probe = await embedder._call(["dimension probe"])
            embedder._dims = int(probe.shape[1])
        return embedder

    @property
    def model_id(self) -> str:
        return f"openai/{self._model}"

    @property
    def dimensions(self) -> int:
        return self._dims

    async def _call(self, texts: list[str]) -> np.ndarray:
        try:
            reply = await self._client.embeddings.create(model=self._model, input=texts, encoding_format="base64")
        except openai.OpenAIError as exc:
            if isinstance(exc, _ENDPOINT_DOWN) or (isinstance(exc, openai.APIStatusError) and exc.status_code >= 500):
                self.health.lost(type(exc).__name__)
            raise UnavailableError(f"embedding endpoint failed: {type(exc).__name__}") from exc
        ordered = sorted(reply.data, key=lambda d: d.index)
        if len(ordered) != len(texts):
            raise UnavailableError(f"embedding endpoint returned {len(ordered)} vectors for {len(texts)} texts")
        rows = [_decode(d.embedding) for d in ordered]
        if len({r.shape[0] for r in rows}) != 1 or rows[0].shape[0] == 0:
            raise UnavailableError("embedding endpoint returned vectors of differing or zero length")
        return normalize(np.vstack(rows))

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        parts = [
            await self._call(list(texts[i : i + self._batch_size])) for i in range(0, len(texts), self._batch_size)
        ]
        if not parts:
            return np.empty((0, self._dims), dtype=np.float32)
        return np.vstack(parts)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(texts)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(texts)


def _decode(embedding: object) -> np.ndarray:
    """One vector from a base64 string (float32, little-endian) or a list of floats (a
    server that ignored encoding_format). Raises `UnavailableError` on anything else."""
    try:
        if isinstance(embedding, str):
            return np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4").astype(np.float32)
        return np.asarray(embedding, dtype=np.float32).reshape(-1)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise UnavailableError(f"embedding endpoint returned an unreadable vector: {exc}") from exc
