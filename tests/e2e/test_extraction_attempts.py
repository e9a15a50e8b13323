"""Extraction job attempts over gRPC (the scripted OpenAI-compatible server): every failed
attempt is listed in GetExtractionJob (bounded, reasons only), and a caller that stops
waiting does not stop the attempt it started, nor lets a second one start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.v1 import writeback_pb2
from tests.e2e.test_extraction import DONE, SCOPE, USER, answer, fact, message
from tests.fake_llm import Delay, FakeLLM, HttpError

FAILED = writeback_pb2.EXTRACTION_JOB_STATUS_FAILED
SECRET = "My locker code is 4417"  # message text: never in an error


async def test_each_failed_attempt_is_listed_without_content(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    turns = [message("a1", USER, SECRET, 0, "Ana")]
    # Attempt 1: prose without the object; attempt 2 (retried after 0.05 s): a good answer.
    llm.script(f"Sure! {SECRET}. Nothing to extract.", answer(fact("user", "Locker", SECRET, ids=["a1"])))
    reply = await llm_client.write_conversation(SCOPE, turns, extract=True, wait=True)
    job = await llm_client.get_extraction_job(reply.extraction_job.id)
    assert (job.status, job.attempt_count) == (DONE, 2)
    [failure] = job.failed_attempts
    assert failure.attempt == 1
    assert failure.error == 'LLM: answer has no {"memories": [...]} object'
    assert failure.fail_time.seconds > 0
    assert job.error == ""  # the last attempt succeeded

    # Two failing attempts (the server's max_attempts is 2): failed, both listed in order.
    turns = [message("b1", USER, "I prefer tea over coffee", 0, "Ana")]
    llm.script(HttpError(500), HttpError(503))
    reply = await llm_client.write_conversation(SCOPE, turns, extract=True, wait=True)
    job = await llm_client.get_extraction_job(reply.extraction_job.id)
    assert job.status == FAILED
    assert [f.attempt for f in job.failed_attempts] == [1, 2]
    assert all(f.error.startswith("LLM: ") and "tea" not in f.error for f in job.failed_attempts)
    assert job.failed_attempts[-1].error == job.error


async def test_a_cancelled_wait_lets_its_attempt_finish(llm: FakeLLM, llm_client: AsyncMemplaneClient) -> None:
    nothing = '{"memories": [], "forget": []}'
    llm.script(Delay(1.0, nothing), Delay(1.0, nothing), Delay(1.0, nothing))
    # Both of the server's workers busy with a job each (their model calls answered slowly)...
    for i in range(2):
        await llm_client.write_conversation(SCOPE, [message(f"w{i}", USER, f"Busy job {i}", 0, "Ana")], extract=True)
    await until(lambda: len(llm.requests) == 2)
    # ...so the request runs its own job; the caller cancels once the model was asked.
    turns = [message("c1", USER, "I moved to Porto in May", 0, "Ana")]
    waiting = asyncio.ensure_future(llm_client.write_conversation(SCOPE, turns, extract=True, wait=True))
    await until(lambda: len(llm.requests) == 3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    # The same messages again are the same job: this wait sees that attempt finish (its
    # lease still held, so no worker ran the job again, and the model was asked once).
    reply = await llm_client.write_conversation(SCOPE, turns, extract=True, wait=True)
    job = reply.extraction_job
    assert (job.status, job.attempt_count, list(job.failed_attempts)) == (DONE, 1, [])
    assert len(llm.requests) == 3


async def until(condition: Callable[[], bool], within_seconds: float = 10.0) -> None:
    """Return once *condition()* holds (checked every 10 ms); fail after *within_seconds*."""
    deadline = time.monotonic() + within_seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
