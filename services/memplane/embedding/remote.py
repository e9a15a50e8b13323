"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (the `openai` client)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import openai

from memplane.embedding.base import normalize
from memplane.errors import UnavailableError


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
            reply = await self._client.embeddings.create(model=self._model, input=texts, encoding_format="float")
        except openai.OpenAIError as exc:
            raise UnavailableError(f"embedding endpoint failed: {type(exc).__name__}") from exc
        ordered = sorted(reply.data, key=lambda d: d.index)
        return normalize(np.array([d.embedding for d in ordered], dtype=np.float32))

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
