"""Dynamic batching of embedding calls (memplane.server.embedding.batching)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from memplane.server.embedding.batching import MAX_PASSED_OVER, BatchingEmbedder
from memplane.server.quota.fair import Flow, current_flow


class _CountingModel:
    """A deterministic stand-in model: vector i of text t is [len(t), i-independent]."""

    model_id = "test/counting"
    dimensions = 2

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False
        self.entered = asyncio.Event()  # set once a call is inside the model

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.entered.set()
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
    await model.entered.wait()  # the first call is now inside the model
    rest = await asyncio.gather(*(batcher.embed_queries(t) for t in (["bb", "ccc"], ["dddd"], ["eeeee"])))
    results = [await first, *rest]
    assert [r[:, 0].tolist() for r in results] == [[1.0], [2.0, 3.0], [4.0], [5.0]]
    # alone, then the three queued behind it (in one call; shortest caller first)
    assert [sorted(call) for call in model.calls] == [["a"], ["bb", "ccc", "dddd", "eeeee"]]


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


class _GatedModel(_CountingModel):
    """A model whose calls each wait until the test opens the gate (no timing involved)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.entered.set()
        await self.gate.wait()
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)


async def test_a_short_query_waits_for_one_model_call_not_for_another_callers_long_texts() -> None:
    model = _GatedModel()
    batcher = BatchingEmbedder(model, max_batch=64, max_chars=1_000)
    long_texts = [c * 600 for c in "abcdef"]  # 6 texts of 600 characters: one model call each
    flood = [asyncio.create_task(batcher.embed_queries(long_texts)) for _ in range(2)]  # another tenant
    await model.entered.wait()  # the first long text is inside the model
    short = asyncio.create_task(batcher.embed_queries(["hi"]))
    await asyncio.sleep(0)  # let the short call enqueue (one loop turn, not a timed wait)
    model.gate.set()
    assert (await short)[:, 0].tolist() == [2.0]
    results = await asyncio.gather(*flood)
    assert [r[:, 0].tolist() for r in results] == [[600.0] * 6] * 2  # every row back, in order
    assert model.calls[1] == ["hi"]  # the call after the one in progress, alone: no padding to 600
    assert all(sum(map(len, call)) <= 1_000 for call in model.calls)


async def test_a_caller_that_gives_up_has_the_rest_of_its_texts_dropped() -> None:
    model = _GatedModel()
    batcher = BatchingEmbedder(model, max_batch=64, max_chars=10)
    gone = asyncio.create_task(batcher.embed_queries([c * 8 for c in "abcdef"]))
    await model.entered.wait()
    gone.cancel()
    model.gate.set()
    assert (await batcher.embed_queries(["ok"]))[:, 0].tolist() == [2.0]
    assert model.calls == [["a" * 8], ["ok"]]  # nothing more embedded for the cancelled caller


async def test_a_long_caller_is_not_starved_by_a_stream_of_short_ones() -> None:
    model = _GatedModel()
    batcher = BatchingEmbedder(model, max_batch=64, max_chars=10)
    first = asyncio.create_task(batcher.embed_queries(["x"]))
    await model.entered.wait()
    long_call = asyncio.create_task(batcher.embed_queries(["L" * 9, "M" * 9]))
    shorts = [asyncio.create_task(batcher.embed_queries([f"s{i}" * 3])) for i in range(2 * MAX_PASSED_OVER + 4)]
    await asyncio.sleep(0)  # let every call enqueue (one loop turn)
    model.gate.set()
    await asyncio.gather(first, long_call, *shorts)
    position = next(i for i, call in enumerate(model.calls) if "L" * 9 in call)
    assert position <= MAX_PASSED_OVER + 1  # passed over at most MAX_PASSED_OVER times, then first


class _LongGatedModel(_CountingModel):
    """Calls with a text over 100 characters wait for the gate; short ones return at once.
    Counts the calls inside the model at the same time."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.inside = 0
        self.most_inside = 0

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        self.entered.set()
        try:
            if any(len(t) > 100 for t in texts):
                await self.gate.wait()
            return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)
        finally:
            self.inside -= 1


async def _as(who: Flow, batcher: BatchingEmbedder, texts: list[str]) -> np.ndarray:
    current_flow.set(who)  # this task's request belongs to workspace *who*
    return await batcher.embed_queries(texts)


async def test_another_workspaces_short_query_runs_beside_a_long_model_call() -> None:
    model = _LongGatedModel()
    batcher = BatchingEmbedder(model, max_batch=64, max_chars=1_000, workers=2)
    noisy, quiet = Flow(1), Flow(2)
    flood = [asyncio.create_task(_as(noisy, batcher, [c * 600 for c in "abc"])) for _ in range(3)]
    await model.entered.wait()  # one of the noisy workspace's long texts is inside the model, and stays
    short = await asyncio.wait_for(_as(quiet, batcher, ["hi"]), 60)  # the guard only bounds a failure
    assert short[:, 0].tolist() == [2.0]
    assert model.most_inside == 2  # the long call, and the short one beside it
    assert all(len(call) == 1 and len(call[0]) == 600 for call in model.calls if call != ["hi"])
    model.gate.set()
    assert [r[:, 0].tolist() for r in await asyncio.gather(*flood)] == [[600.0] * 3] * 3


async def test_one_workspace_alone_starts_all_but_one_of_the_model_calls() -> None:
    model = _LongGatedModel()
    batcher = BatchingEmbedder(model, max_batch=64, max_chars=1_000, workers=3)
    flood = [asyncio.create_task(_as(Flow(1), batcher, ["x" * 600])) for _ in range(6)]
    await model.entered.wait()
    for _ in range(3):
        await asyncio.sleep(0)  # loop turns for any further call to start (none may)
    assert model.inside == 2
    model.gate.set()
    await asyncio.gather(*flood)
    assert model.most_inside == 2


async def test_model_calls_are_shared_by_weight() -> None:
    model = _GatedModel()
    batcher = BatchingEmbedder(model, max_batch=1, max_chars=1_000, workers=1)
    blocker = asyncio.create_task(_as(Flow(9), batcher, ["b"]))
    await model.entered.wait()  # every call below queues behind this one
    light, heavy = Flow(1, weight=1.0), Flow(2, weight=3.0)
    tasks = [
        asyncio.create_task(_as(who, batcher, [name])) for _ in range(12) for who, name in ((light, "L"), (heavy, "H"))
    ]
    await asyncio.sleep(0)  # let every call enqueue (one loop turn)
    model.gate.set()
    await asyncio.gather(blocker, *tasks)
    first_16 = [call[0] for call in model.calls[1:17]]
    assert first_16.count("H") == 12
    assert first_16.count("L") == 4  # 3 : 1 while both wait
