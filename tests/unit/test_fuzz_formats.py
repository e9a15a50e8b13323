"""The message converters fuzzed (hypothesis): OpenAI Chat Completions messages and
AgentScope `Msg` dicts of any shape near the real ones — every role, block type, key and
a wrong type for each. Property: each converts, or raises the documented `ValueError`
naming the field (`messages[i]…` / `msgs[i]…`), never another exception; and what
converts comes back the same through the other direction (`from_*(to_*(x)) == x`).
Derandomized and bounded; crashes found are kept as `@example`s."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memplane.client.formats import ContextMessage, from_agentscope, from_openai, to_agentscope, to_openai

T = TypeVar("T")

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# A small alphabet so ids and names collide (a tool result finds its call), plus anything.
texts = st.one_of(
    st.sampled_from(["", "a", "b", "call_1", "get_weather", '{"x": 1}', "\x00", "中文"]),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), texts),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=6,
)


def _shaped(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Dicts of the given keys' strategies, or now and then any JSON value instead."""
    return st.one_of(st.fixed_dictionaries(required, optional=optional), json_values)


openai_parts = _shaped({"type": st.sampled_from(["text", "image_url", "refusal", "file"])}, {"text": texts})
openai_content = st.one_of(texts, st.none(), st.lists(openai_parts, max_size=3), json_values)
openai_calls = _shaped(
    {"id": texts, "type": st.sampled_from(["function", "custom"])},
    {"function": _shaped({"name": texts}, {"arguments": st.one_of(texts, json_values)})},
)
openai_messages = st.lists(
    _shaped(
        {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", "x"])},
        {
            "content": openai_content,
            "name": st.one_of(texts, json_values),
            "tool_calls": st.one_of(st.lists(openai_calls, max_size=2), json_values),
            "tool_call_id": st.one_of(texts, json_values),
            "refusal": st.one_of(st.none(), texts),
            "audio": st.none(),
            "annotations": st.one_of(st.none(), st.just([])),
            "function_call": st.one_of(st.none(), json_values),
        },
    ),
    max_size=5,
)

_BLOCK_TYPES = ["text", "thinking", "tool_call", "tool_use", "tool_result", "image", "hint", "data", "x"]
agentscope_output = st.one_of(texts, st.lists(_shaped({"type": st.sampled_from(["text", "image"])}, {"text": texts})))
agentscope_blocks = _shaped(
    {"type": st.sampled_from(_BLOCK_TYPES)},
    {
        "text": texts,
        "thinking": texts,
        "id": texts,
        "name": texts,
        "input": st.one_of(texts, st.dictionaries(texts, json_values, max_size=2)),
        "raw_input": texts,
        "output": agentscope_output,
        "metadata": st.one_of(st.just({}), json_values),
    },
)
agentscope_times = st.one_of(
    st.none(),
    st.datetimes().map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]),
    texts,
    json_values,
)
_noisy_msgs = _shaped(
    {"role": st.sampled_from(["user", "assistant", "system", "tool", "x"])},
    {
        "content": st.one_of(texts, st.lists(agentscope_blocks, max_size=3), json_values),
        "id": st.one_of(texts, json_values),
        "name": st.one_of(texts, json_values),
        "created_at": agentscope_times,
        "timestamp": agentscope_times,
        "metadata": json_values,
    },
)
# Well-formed Msgs too, or almost nothing random would convert.
_good_blocks = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": texts}),
    st.fixed_dictionaries({"type": st.just("tool_call"), "id": texts, "name": texts, "input": texts}),
    st.fixed_dictionaries(
        {"type": st.just("tool_use"), "id": texts, "name": texts, "input": st.dictionaries(texts, json_values)},
        optional={"raw_input": texts},
    ),
    st.fixed_dictionaries({"type": st.just("tool_result"), "id": texts, "name": texts, "output": agentscope_output}),
)
_good_msgs = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "system"]),
        "name": texts,
        "content": st.one_of(texts, st.lists(_good_blocks, min_size=1, max_size=3)),
    },
    optional={"id": texts, "created_at": agentscope_times, "timestamp": agentscope_times},
)
agentscope_msgs = st.lists(st.one_of(_good_msgs, _noisy_msgs), max_size=4)


def _to_milliseconds(messages: list[ContextMessage]) -> list[ContextMessage]:
    """Copies of *messages* with `create_time` cut to the millisecond (as AgentScope 1.x
    `Msg.timestamp` holds it)."""
    out = []
    for message in messages:
        cut = ContextMessage()
        cut.CopyFrom(message)
        if cut.HasField("create_time"):
            cut.create_time.nanos -= cut.create_time.nanos % 1_000_000
        out.append(cut)
    return out


def _attempt(convert: Callable[[Any], T], data: Any) -> tuple[T | None, str]:
    """(result, "") or (None, the message of the ValueError it raised)."""
    try:
        return convert(data), ""
    except ValueError as error:
        return None, str(error)


def _documented(message: str, root: str) -> bool:
    return message.startswith(f"{root}[")


@pytest.mark.timeout(60)  # a bounded fuzz run, longer than a unit test's 10 s
def test_any_openai_messages_convert_or_name_the_field() -> None:
    seen: Counter[str] = Counter()

    @FUZZ
    @given(messages=openai_messages)
    @example(messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}])
    def check(messages: list[Any]) -> None:
        try:
            system_prompt, converted = from_openai(messages)
        except ValueError as error:
            refused = str(error)
        else:
            assert from_openai(to_openai(system_prompt, converted)) == (system_prompt, converted)
            seen["converted" if converted else "empty"] += 1
            return
        assert _documented(refused, "messages"), refused
        seen["refused"] += 1

    check()
    assert min(seen["converted"], seen["refused"]) > 0, seen  # both paths were explored


@pytest.mark.timeout(60)
def test_any_agentscope_msgs_convert_or_name_the_field() -> None:
    seen: Counter[str] = Counter()

    @FUZZ
    @given(msgs=agentscope_msgs, version=st.sampled_from([1, 2]))
    # Found by this test: AgentScope 1.x times before year 1000 were written as "999-01-01
    # ..." (glibc's %Y is not zero-padded), which from_agentscope could not read back.
    @example(msgs=[{"role": "user", "name": "", "content": "a", "created_at": "0999-01-01T00:00:00"}], version=1)
    def check(msgs: list[Any], version: Literal[1, 2]) -> None:
        converted, refused = _attempt(from_agentscope, msgs)
        if converted is None:
            assert _documented(refused, "msgs"), refused
            seen["refused"] += 1
            return
        written, unwritable = _attempt(lambda c: to_agentscope(c, version=version), converted)
        if written is None:  # documented: blocks AgentScope 2.x refuses (a tool call from a user)
            assert version == 2, unwritable
            assert _documented(unwritable, "messages"), unwritable
            seen["not writable"] += 1
            return
        expected = converted if version == 2 else _to_milliseconds(converted)  # 1.x times: documented
        assert from_agentscope(written) == expected
        seen["converted" if converted else "empty"] += 1

    check()
    assert min(seen["converted"], seen["refused"]) > 0, seen
