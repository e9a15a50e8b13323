"""The LLM provider (memplane.server.llm) against the scripted OpenAI-compatible server: the
structured-output request and its JSON-mode fallback, retries with Retry-After, the
per-workspace model and rate limit, and the repair of broken JSON answers as models
really send them."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest

from memplane.domain.models import Workspace
from memplane.errors import QuotaExceededError
from memplane.server.compaction.llm import LLMSummarizer, SummarizerError
from memplane.server.llm.chat import ChatModel, LLMError
from memplane.server.llm.rate import LLMRateLimiter
from memplane.server.llm.repair import fix_escapes, parse_object
from tests.fake_llm import FakeLLM, HttpError, Respond, error_body

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
HI = [{"role": "user", "content": "hi"}]


def workspace(name: str, key: int = 1) -> Workspace:
    return Workspace(key=key, name=name, embedding_model="m", embedding_dimensions=4, created_at=datetime.now(UTC))


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
async def chat(fake: FakeLLM) -> AsyncIterator[ChatModel]:
    model = ChatModel(
        base_url=fake.base_url,
        api_key="k",
        model="default-model",
        timeout_seconds=5.0,
        max_retries=2,
        workspace_models={"acme": "acme-model"},
    )
    yield model
    await model.close()


async def test_a_schema_is_sent_as_json_schema(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script('{"ok": true}')
    answer = await chat.chat(HI, json_mode=True, schema=SCHEMA, schema_name="probe")
    assert answer.text == '{"ok": true}'
    assert answer.output == "json_schema"
    assert answer.prompt_tokens > 0
    assert answer.completion_tokens > 0
    fmt = fake.requests[0]["response_format"]
    assert fmt == {"type": "json_schema", "json_schema": {"name": "probe", "schema": SCHEMA, "strict": False}}


async def test_a_server_without_json_schema_gets_json_mode_and_is_remembered(fake: FakeLLM, chat: ChatModel) -> None:
    fake.reject_json_schema = True
    fake.script('{"ok": true}', '{"ok": false}')
    first = await chat.chat(HI, json_mode=True, schema=SCHEMA)
    second = await chat.chat(HI, json_mode=True, schema=SCHEMA)
    assert (first.output, second.output) == ("json_object", "json_object")
    formats = [r["response_format"]["type"] for r in fake.requests]
    assert formats == ["json_schema", "json_object", "json_object"]  # asked once, then never again


async def test_another_400_is_a_failure_not_a_fallback(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script(HttpError(400, error_body("messages must not be empty", "invalid_request_error")))
    with pytest.raises(LLMError, match="HTTP 400 from the LLM endpoint: messages must not be empty"):
        await chat.chat(HI, json_mode=True, schema=SCHEMA)
    assert len(fake.requests) == 1


async def test_429_waits_for_retry_after_then_succeeds(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script(HttpError(429, error_body("slow down", "rate_limit_error"), (("Retry-After", "0.3"),)), "{}")
    started = time.perf_counter()
    answer = await chat.chat(HI, json_mode=True)
    assert answer.text == "{}"
    assert time.perf_counter() - started >= 0.3
    assert len(fake.requests) == 2


async def test_retries_are_bounded(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script(HttpError(500), HttpError(502), HttpError(503))
    with pytest.raises(LLMError, match="HTTP 503"):
        await chat.chat(HI, json_mode=False)
    assert len(fake.requests) == 3  # one attempt and max_retries=2 more


async def test_a_workspace_gets_its_own_model(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script(Respond(lambda body: json.dumps({"model": body["model"]})), "{}")
    answer = await chat.chat(HI, json_mode=True, workspace=workspace("acme"))
    await chat.chat(HI, json_mode=True, workspace=workspace("other", key=2))
    assert json.loads(answer.text) == {"model": "acme-model"}
    assert [r["model"] for r in fake.requests] == ["acme-model", "default-model"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_the_rate_limit_waits_then_refuses() -> None:
    clock = Clock()
    limiter = LLMRateLimiter(60, workspace_limits={"slow": 6}, max_wait_seconds=15.0, clock=clock, sleep=clock.sleep)
    fast, slow = workspace("fast", 1), workspace("slow", 2)
    assert await limiter.acquire(fast) == 0.0
    assert await limiter.acquire(fast) == pytest.approx(1.0)  # 60 per minute: one a second
    assert await limiter.acquire(slow) == 0.0
    assert await limiter.acquire(slow) == pytest.approx(10.0)  # 6 per minute: one in ten seconds
    limiter_tight = LLMRateLimiter(6, max_wait_seconds=5.0, clock=clock, sleep=clock.sleep)
    await limiter_tight.acquire(slow)
    with pytest.raises(QuotaExceededError, match="llm_requests_per_minute") as caught:
        await limiter_tight.acquire(slow)
    assert caught.value.quota_id == "llm_requests_per_minute"
    assert caught.value.limit == 6
    unlimited = LLMRateLimiter(0, clock=clock, sleep=clock.sleep)
    for _ in range(100):
        assert await unlimited.acquire(fast) == 0.0


# -- repair: broken answers as models send them ---------------------------------------
BROKEN = [
    # qwen2.5-7b-instruct in JSON mode: a fence around the object
    ('```json\n{"memories": [{"type": "user", "content": "Ana lives in Lisbon"}]}\n```', ("fence",)),
    # llama-3.1-8b without JSON mode: prose around the object
    (
        'Sure! Here are the memories I found:\n{"memories": [{"type": "user", "content": "Ana lives in Lisbon"}]}\n'
        "Let me know if you need anything else.",
        ("prose",),
    ),
    # a Windows path with its backslashes unescaped, and an escaped apostrophe
    (
        '{"memories": [{"type": "tool", "content": "Ana\\\'s notes are in C:\\Users\\ana\\Documents"}]}',
        ("escapes",),
    ),
    # a trailing comma after the last item and the last key
    ('{"memories": [{"type": "user", "content": "Ana lives in Lisbon",},],}', ("trailing_comma",)),
    # a raw newline inside a string (control characters are not allowed by strict JSON)
    ('{"memories": [{"type": "user", "content": "Ana lives\nin Lisbon"}]}', ()),
]


@pytest.mark.parametrize(("answer", "repairs"), BROKEN)
def test_broken_answers_are_repaired(answer: str, repairs: tuple[str, ...]) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(answer)  # each sample really is broken JSON
    parsed = parse_object(answer, lambda o: isinstance(o.get("memories"), list))
    assert parsed is not None
    assert parsed.repairs == repairs
    [item] = parsed.value["memories"]
    assert "Ana" in item["content"]


def test_repaired_escapes_keep_the_text() -> None:
    parsed = parse_object(BROKEN[2][0])
    assert parsed is not None
    assert parsed.value["memories"][0]["content"] == "Ana's notes are in C:\\Users\\ana\\Documents"
    assert fix_escapes('"a\\nb \\u00e9 \\"q\\" \\\\ \\x"') == '"a\\nb \\u00e9 \\"q\\" \\\\ \\\\x"'


def test_a_good_answer_is_read_as_sent_and_garbage_is_none() -> None:
    parsed = parse_object('{"a": "C:\\\\x"}')
    assert parsed is not None
    assert parsed.repairs == ()
    assert parsed.value == {"a": "C:\\x"}
    assert parse_object("I could not find anything worth remembering.") is None
    assert parse_object('{"memories": [') is None


async def test_compaction_uses_the_workspace_model_and_reports_its_rate_limit(fake: FakeLLM) -> None:
    clock = Clock()
    limiter = LLMRateLimiter(1, max_wait_seconds=5.0, clock=clock, sleep=clock.sleep)
    model = ChatModel(
        base_url=fake.base_url,
        api_key="k",
        model="default-model",
        timeout_seconds=5.0,
        workspace_models={"acme": "acme-model"},
        rate_limiter=limiter,
    )
    acme = workspace("acme")
    fake.script('{"memories": []}')
    try:
        summarizer = LLMSummarizer(model)
        got = await summarizer.extract([], language="en", limits=(100, 100, 100), workspace=acme)
        assert got.extraction.facts == []
        with pytest.raises(SummarizerError, match="rate limited: llm_requests_per_minute"):
            await summarizer.extract([], language="en", limits=(100, 100, 100), workspace=acme)
    finally:
        await model.close()
    assert [r["model"] for r in fake.requests] == ["acme-model"]
