"""`max_embedding_tokens_per_day`: embedders that charge a workspace before they embed.

Tokens are counted with cl100k_base (the shared counter, `memplane.text.tokens`), the
tokenizer of OpenAI's embedding models, whatever the model: one unit for every provider.
Every text sent for embedding is charged (cache hits included, so the count does not
depend on which replica served the call); texts written with a precomputed embedding are
not embedded, hence free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np

from memplane.domain.models import Workspace
from memplane.embedding.base import Embedder
from memplane.errors import QuotaExceededError
from memplane.storage.database import Database
from memplane.storage.embedding_usage import charge_tokens
from memplane.text.tokens import token_counter

METER_ENCODING = "cl100k_base"


class EmbeddingMeter:
    """Hands out the embedder a workspace's request must use. *clock* gives the UTC time
    whose date is the metered day."""

    def __init__(self, db: Database, embedder: Embedder, clock: Callable[[], datetime] | None = None) -> None:
        self._db = db
        self._embedder = embedder
        self._clock = clock or (lambda: datetime.now(UTC))
        self._counter = token_counter(METER_ENCODING)

    @property
    def embedder(self) -> Embedder:
        """The shared, unmetered embedder (for model checks, never for a workspace's texts)."""
        return self._embedder

    def count(self, texts: Sequence[str]) -> int:
        """cl100k_base tokens of *texts*."""
        return sum(self._counter.count_texts(texts))

    def for_workspace(self, workspace: Workspace) -> Embedder:
        """The shared embedder itself when the workspace has no daily token quota, else a
        view that charges the workspace first (one statement per embedding call)."""
        if workspace.quotas.max_embedding_tokens_per_day <= 0:
            return self._embedder
        return _MeteredEmbedder(self, workspace)

    async def charge(self, workspace: Workspace, texts: Sequence[str]) -> None:
        """Charge *texts* to today's total. Raises `QuotaExceededError` (quota_id
        ``max_embedding_tokens_per_day``) and charges nothing when they would pass it."""
        tokens = self.count(texts)
        total = await charge_tokens(self._db, workspace.key, self._clock().date(), tokens)
        if total is None:
            limit = workspace.quotas.max_embedding_tokens_per_day
            raise QuotaExceededError(
                f"workspace:{workspace.name}",
                f"max_embedding_tokens_per_day: embedding {tokens} more tokens would pass the quota of "
                f"{limit} tokens for today (UTC)",
                quota_id="max_embedding_tokens_per_day",
                limit=limit,
            )


class _MeteredEmbedder:
    """An `Embedder` charging one workspace before delegating to the shared embedder."""

    def __init__(self, meter: EmbeddingMeter, workspace: Workspace) -> None:
        self._meter = meter
        self._workspace = workspace
        self._inner = meter.embedder

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        await self._meter.charge(self._workspace, texts)
        return await self._inner.embed_documents(texts)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        await self._meter.charge(self._workspace, texts)
        return await self._inner.embed_queries(texts)
