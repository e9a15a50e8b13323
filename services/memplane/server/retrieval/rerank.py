"""The rerank stage of a search: a cross-encoder behind a /rerank HTTP endpoint re-scores
the best fused candidates.

Two wire protocols (`RerankSettings.protocol`):
- ``cohere``: POST {model, query, documents: [str], top_n} -> {results: [{index,
  relevance_score}, ...]} — Cohere's /v1 and /v2/rerank, Jina's /v1/rerank, and the
  servers copying them (vLLM, Infinity);
- ``tei``: POST {query, texts: [str], truncate: true} -> [{index, score}, ...] — Hugging
  Face text-embeddings-inference's /rerank.

`Reranker.rescore` sends one call per query (concurrently), keeps each document's best
score over the queries (as the fused search keeps a memory's best query), and returns per
document its raw score, its min-max normalised score and its 1-based rank. It raises
`RerankError` (with a message fit for the reply's note) on any failure: HTTP status,
connection error, malformed body, a reply missing documents, or the whole stage taking
longer than `timeout` seconds. The caller then keeps the fused order; a reranker never
fails a search nor holds it past its timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from memplane.server.retrieval.fusion import SignalHit
from memplane.server.settings import RerankSettings


class RerankError(Exception):
    """The reranker gave no usable scores; the message says why (no secrets in it)."""


class Reranker:
    """Client of one /rerank endpoint (one pooled `httpx.AsyncClient`); close with `close`."""

    def __init__(self, settings: RerankSettings) -> None:
        if settings.url is None:
            raise ValueError("rerank.url is unset")
        self._url = settings.url
        self._settings = settings
        headers = {"Content-Type": "application/json"}
        if settings.api_key is not None:
            headers["Authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._client = httpx.AsyncClient(headers=headers, timeout=settings.timeout)

    @property
    def top_n(self) -> int:
        """Fused candidates to re-score per search."""
        return self._settings.top_n

    async def rescore(self, queries: Sequence[str], documents: list[str]) -> list[SignalHit]:
        """Per document of *documents* (input order): its best relevance over *queries*
        (the model's own scale, higher is better), that score min-max normalised over the
        documents, and its 1-based rank. Raises `RerankError` on any failure or past the
        timeout (the whole stage, every query's call together)."""
        if not documents:
            return []
        try:
            async with asyncio.timeout(self._settings.timeout):
                per_query = await asyncio.gather(*(self._scores(q, documents) for q in queries))
        except TimeoutError:
            raise RerankError(f"no reply within {self._settings.timeout:g} s") from None
        best = [max(column) for column in zip(*per_query, strict=True)]
        order = sorted(range(len(best)), key=lambda i: (-best[i], i))
        ranks = {doc: rank for rank, doc in enumerate(order, start=1)}
        top, bottom = max(best), min(best)
        spread = top - bottom
        return [
            SignalHit(score=s, normalized=(s - bottom) / spread if spread > 0 else 1.0, rank=ranks[i])
            for i, s in enumerate(best)
        ]

    async def _scores(self, query: str, documents: list[str]) -> list[float]:
        """One call: relevance of each document to *query*, in input order."""
        try:
            response = await self._client.post(self._url, json=self._body(query, documents))
        except httpx.TimeoutException:
            raise RerankError(f"no reply within {self._settings.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise RerankError(f"{type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise RerankError(f"HTTP {response.status_code}: {response.text[:200]}")
        try:
            return _parse(self._settings.protocol, response.json(), len(documents))
        except ValueError as exc:
            raise RerankError(f"malformed reply: {exc}") from None

    def _body(self, query: str, documents: list[str]) -> dict[str, Any]:
        if self._settings.protocol == "tei":
            return {"query": query, "texts": documents, "truncate": True}
        body: dict[str, Any] = {"query": query, "documents": documents, "top_n": len(documents)}
        if self._settings.model:
            body["model"] = self._settings.model
        return body

    async def close(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()


def _parse(protocol: str, body: Any, count: int) -> list[float]:
    """Scores in input order from a reply body; ValueError names what is wrong."""
    items = body if protocol == "tei" else (body.get("results") if isinstance(body, dict) else None)
    key = "score" if protocol == "tei" else "relevance_score"
    if not isinstance(items, list):
        raise ValueError("expected a list of results" if protocol == "tei" else "expected {results: [...]}")
    scores: list[float | None] = [None] * count
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get(key) if isinstance(item, dict) else None
        if not isinstance(index, int) or not 0 <= index < count:
            raise ValueError(f"result index {index!r} outside 0..{count - 1}")
        if not isinstance(score, int | float) or isinstance(score, bool):
            raise ValueError(f"result {index} has no numeric {key}")
        scores[index] = float(score)
    missing = sum(1 for s in scores if s is None)
    if missing:
        raise ValueError(f"{missing} of {count} documents have no score")
    return [s for s in scores if s is not None]
