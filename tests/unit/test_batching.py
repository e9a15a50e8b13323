"""Dynamic batching of embedding calls (memplane.embedding.batching)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from memplane.embedding.batching import BatchingEmbedder


class _CountingModel:
    """A deterministic stand-in model: vector i of text t is [len(t), i-independent]."""

    model_id = "test/counting"
    dimensions = 2

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        await asyncio.sleep(0.01)
        if self.fail:
            raise RuntimeError("model down")
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(texts)

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await self._embed(texts)


async def test_concurrent_calls_share_model_calls_and_get_their_own_rows() -> None:
    model = _CountingModel()
    batcher = BatchingEmbedder(model, max_batch=64)
    first = asyncio.create_task(batcher.embed_queries(["a"]))
    await asyncio.sleep(0.002)  # the first call is now inside the model
    rest = await asyncio.gather(*(batcher.embed_queries(t) for t in (["bb", "ccc"], ["dddd"], ["eeeee"])))
    results = [await first, *rest]
    assert [r[:, 0].tolist() for r in results] == [[1.0], [2.0, 3.0], [4.0], [5.0]]
    assert model.calls == [["a"], ["bb", "ccc", "dddd", "eeeee"]]  # alone, then the three queued behind it


async def test_batches_respect_max_batch() -> None:
    model = _CountingModel()
    batcher = BatchingEmbedder(model, max_batch=2)
    await asyncio.gather(*(batcher.embed_documents([str(i)]) for i in range(5)))
    assert all(len(call) <= 2 for call in model.calls)
    assert sorted(t for call in model.calls for t in call) == ["0", "1", "2", "3", "4"]


async def test_a_model_failure_reaches_every_waiting_caller() -> None:
    model = _CountingModel()
    model.fail = True
    batcher = BatchingEmbedder(model)
    results = await asyncio.gather(*(batcher.embed_queries(["x"]) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    model.fail = False
    ok = await batcher.embed_queries(["yy"])
    assert ok[:, 0].tolist() == [2.0]


async def test_empty_input_skips_the_model() -> None:
    model = _CountingModel()
    out = await BatchingEmbedder(model).embed_queries([])
    assert out.shape == (0, 2)
    assert model.calls == []


def test_results_equal_an_unbatched_call() -> None:
    async def run() -> tuple[np.ndarray, np.ndarray]:
        model = _CountingModel()
        direct = await model.embed_queries(["one", "three"])
        batched = await BatchingEmbedder(model).embed_queries(["one", "three"])
        return direct, batched

    direct, batched = asyncio.run(run())
    assert np.array_equal(direct, batched)
