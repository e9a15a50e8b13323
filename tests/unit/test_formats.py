"""Message format conversions (memplane.client.formats): OpenAI Chat Completions and
AgentScope `Msg` dicts to and from `ContextMessage`, lossless for what the model reads."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

import pytest

from memplane.client.formats import (
    TRUNCATION_METADATA_KEY,
    assistant,
    from_agentscope,
    from_openai,
    to_agentscope,
    to_openai,
    user,
)
from memplane.v1 import compaction_pb2, memory_pb2

ContextMessage = compaction_pb2.ContextMessage
ContentBlock = compaction_pb2.ContentBlock
USER = memory_pb2.MESSAGE_ROLE_USER
ASSISTANT = memory_pb2.MESSAGE_ROLE_ASSISTANT
SYSTEM = memory_pb2.MESSAGE_ROLE_SYSTEM
TOOL = memory_pb2.MESSAGE_ROLE_TOOL

ARGS = '{"city": "Paris", "filters": {"units": "°C", "days": [1, 2]}}'
COMPACT_ARGS = '{"q":"東京 weather","limit":3}'


def text(t: str) -> ContentBlock:
    return ContentBlock(text=compaction_pb2.TextBlock(text=t))


def tool_use(call_id: str, name: str, input_json: str) -> ContentBlock:
    return ContentBlock(tool_use=compaction_pb2.ToolUseBlock(id=call_id, name=name, input_json=input_json))


def tool_result(call_id: str, name: str, output: str) -> ContentBlock:
    return ContentBlock(tool_result=compaction_pb2.ToolResultBlock(tool_use_id=call_id, name=name, output=output))


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# A whole tool-using conversation in normal OpenAI form (string content).
OPENAI_CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a travel assistant."},
    {"role": "user", "content": "Weather in Paris and Tokyo?", "name": "alice"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [call("call_1", "weather", ARGS), call("call_2", "search", COMPACT_ARGS)],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18°C, sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": "line 1\nline 2"},
    {"role": "assistant", "content": "Paris: 18°C. Tokyo: see results.", "name": "Friday"},
]


# -- OpenAI --------------------------------------------------------------------------------


def test_plain_chat_round_trips_and_keeps_names() -> None:
    chat: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi", "name": "alice"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": ""},
    ]
    system_prompt, messages = from_openai(chat)
    assert system_prompt == "Be brief."
    assert messages == [
        ContextMessage(role=USER, name="alice", content=[text("hi")]),
        ContextMessage(role=ASSISTANT, content=[text("hello")]),
        ContextMessage(role=USER, content=[text("")]),
    ]
    assert to_openai(system_prompt, messages) == chat


def test_tool_calls_and_tool_messages_round_trip() -> None:
    system_prompt, messages = from_openai(OPENAI_CHAT)
    assert system_prompt == "You are a travel assistant."
    assert [m.role for m in messages] == [USER, ASSISTANT, TOOL, TOOL, ASSISTANT]
    # content None: only the tool calls, arguments verbatim (spacing, unicode, nesting)
    assert list(messages[1].content) == [
        tool_use("call_1", "weather", ARGS),
        tool_use("call_2", "search", COMPACT_ARGS),
    ]
    # tool messages answer by id; the tool name comes from the call
    assert list(messages[2].content) == [tool_result("call_1", "weather", "18°C, sunny")]
    assert list(messages[3].content) == [tool_result("call_2", "search", "line 1\nline 2")]
    assert messages[4].name == "Friday"
    assert to_openai(system_prompt, messages) == OPENAI_CHAT


def test_assistant_with_text_and_tool_calls_round_trips() -> None:
    chat: list[dict[str, Any]] = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "Let me compute.", "tool_calls": [call("c", "calc", '{"expr": "2+2"}')]},
        {"role": "tool", "tool_call_id": "c", "content": "4"},
    ]
    _, messages = from_openai(chat)
    assert list(messages[1].content) == [text("Let me compute."), tool_use("c", "calc", '{"expr": "2+2"}')]
    assert to_openai("", messages) == chat


def test_tool_message_name_is_kept_when_it_says_more_than_the_call() -> None:
    chat: list[dict[str, Any]] = [
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "weather", "{}")]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "weather_v2"},
        {"role": "tool", "tool_call_id": "unknown", "content": "?", "name": "lookup"},
    ]
    _, messages = from_openai(chat)
    assert messages[1].content[0].tool_result.name == "weather_v2"
    assert to_openai("", messages) == chat
    # a name equal to the call's is implied by the call: normalised away
    redundant: list[dict[str, Any]] = [
        chat[0],
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "weather"},
    ]
    assert to_openai(*from_openai(redundant)) == [chat[0], {"role": "tool", "tool_call_id": "c1", "content": "ok"}]


def test_system_and_developer_messages_join_into_the_system_prompt() -> None:
    chat: list[dict[str, Any]] = [
        {"role": "developer", "content": "Rule one."},
        {"role": "system", "content": [{"type": "text", "text": "Rule"}, {"type": "text", "text": "two."}]},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Late rule.", "name": "ops"},
    ]
    system_prompt, messages = from_openai(chat)
    assert system_prompt == "Rule one.\n\nRule\ntwo.\n\nLate rule."
    assert messages == [ContextMessage(role=USER, content=[text("hi")])]
    assert to_openai(system_prompt, messages) == [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": "hi"},
    ]
    assert from_openai([{"role": "user", "content": "x"}])[0] == ""


def test_text_parts_become_text_blocks() -> None:
    parts = [{"type": "text", "text": "Look at"}, {"type": "text", "text": "this."}]
    chat: list[dict[str, Any]] = [{"role": "user", "content": parts}, {"role": "assistant", "content": parts}]
    _, messages = from_openai(chat)
    assert list(messages[0].content) == [text("Look at"), text("this.")]
    assert to_openai("", messages) == chat  # several parts stay parts
    # one part, and parts of a tool output, normalise to string content
    single: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "tool", "tool_call_id": "t", "content": parts},
    ]
    assert to_openai(*from_openai(single)) == [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "t", "content": "Look at\nthis."},
    ]


def test_sdk_model_dump_nulls_are_accepted() -> None:
    # what `ChatCompletionMessage.model_dump()` gives for a tool-calling reply
    dumped = {
        "content": None,
        "refusal": None,
        "role": "assistant",
        "annotations": [],
        "audio": None,
        "function_call": None,
        "tool_calls": [call("c", "f", "{}")],
    }
    _, messages = from_openai([dumped])
    assert messages == [ContextMessage(role=ASSISTANT, content=[tool_use("c", "f", "{}")])]


def test_agentscope_style_messages_split_into_openai_messages() -> None:
    messages = [
        # AgentScope 1.x: several results in one message
        ContextMessage(role=TOOL, name="system", content=[tool_result("a", "f", "A"), tool_result("b", "g", "B")]),
        # AgentScope 2.x: a whole reply in one assistant message
        ContextMessage(
            role=ASSISTANT,
            name="Friday",
            content=[
                text("Checking."),
                tool_use("c", "f", "{}"),
                tool_result("c", "f", "C"),
                text("Done."),
            ],
        ),
        # Anthropic style: results in a user message, then text
        ContextMessage(role=USER, content=[tool_result("d", "h", "D"), text("thanks")]),
        ContextMessage(role=SYSTEM, name="ops", content=[text("mid-conversation rule")]),
    ]
    assert to_openai("", messages) == [
        {"role": "tool", "tool_call_id": "a", "content": "A", "name": "f"},
        {"role": "tool", "tool_call_id": "b", "content": "B", "name": "g"},
        {"role": "assistant", "content": "Checking.", "name": "Friday", "tool_calls": [call("c", "f", "{}")]},
        {"role": "tool", "tool_call_id": "c", "content": "C"},
        {"role": "assistant", "content": "Done.", "name": "Friday"},
        {"role": "tool", "tool_call_id": "d", "content": "D", "name": "h"},
        {"role": "user", "content": "thanks"},
        {"role": "system", "content": "mid-conversation rule", "name": "ops"},
    ]


def test_openai_shaped_context_messages_round_trip() -> None:
    messages = [
        user("hi", name="alice"),
        ContextMessage(role=ASSISTANT, content=[text("a"), text("b"), tool_use("c", "f", '{"x": 1}')]),
        ContextMessage(role=TOOL, content=[tool_result("c", "f", "out")]),
        assistant("bye", name="Friday"),
    ]
    assert from_openai(to_openai("prompt", messages)) == ("prompt", messages)


# -- AgentScope ----------------------------------------------------------------------------------


def as2_msg(role: str, content: list[dict[str, Any]], *, name: str, msg_id: str, created_at: str) -> dict[str, Any]:
    return {"id": msg_id, "name": name, "role": role, "content": content, "created_at": created_at}


def test_agentscope2_text_messages_round_trip_with_times() -> None:
    msgs: list[dict[str, Any]] = [
        as2_msg("user", [{"type": "text", "text": "你好"}], name="user", msg_id="m1", created_at="2025-03-01T12:34:56"),
        as2_msg(
            "assistant",
            [{"type": "text", "text": "Hi!"}, {"type": "text", "text": "How can I help?"}],
            name="Friday",
            msg_id="m2",
            created_at="2025-03-01T12:34:57.250001",
        ),
    ]
    messages = from_agentscope(msgs)
    assert [(m.id, m.role, m.name) for m in messages] == [("m1", USER, "user"), ("m2", ASSISTANT, "Friday")]
    assert list(messages[1].content) == [text("Hi!"), text("How can I help?")]
    # AgentScope's local naive time is read as UTC
    assert messages[0].create_time.ToDatetime(tzinfo=UTC) == datetime(2025, 3, 1, 12, 34, 56, tzinfo=UTC)
    assert messages[1].create_time.ToDatetime(tzinfo=UTC) == datetime(2025, 3, 1, 12, 34, 57, 250001, tzinfo=UTC)
    assert to_agentscope(messages) == msgs


def test_agentscope2_reply_with_tool_call_and_result_round_trips() -> None:
    truncation = compaction_pb2.ToolResultTruncation(ref="tr_1", total_bytes=9000, total_lines=120, kept_bytes=3000)
    truncation.expire_time.FromDatetime(datetime(2025, 3, 4, tzinfo=UTC))
    reply = {
        "id": "r1",
        "name": "Friday",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_call", "id": "call_1", "name": "weather", "input": COMPACT_ARGS},
            {
                "type": "tool_result",
                "id": "call_1",
                "name": "weather",
                "output": [{"type": "text", "text": "18°C"}],
                "metadata": {
                    TRUNCATION_METADATA_KEY: {
                        "ref": "tr_1",
                        "total_bytes": "9000",
                        "total_lines": "120",
                        "kept_bytes": "3000",
                        "expire_time": "2025-03-04T00:00:00Z",
                    }
                },
            },
            {"type": "text", "text": "It is 18°C."},
        ],
    }
    [message] = from_agentscope([reply])
    assert message.role == ASSISTANT  # call and result stay together, in order
    result = compaction_pb2.ToolResultBlock(tool_use_id="call_1", name="weather", output="18°C", truncation=truncation)
    assert list(message.content) == [
        text("Checking."),
        tool_use("call_1", "weather", COMPACT_ARGS),  # 2.x input is the raw JSON: verbatim
        ContentBlock(tool_result=result),
        text("It is 18°C."),
    ]
    assert to_agentscope([message]) == [reply]


def test_agentscope2_model_dump_bookkeeping_is_ignored() -> None:
    # the shape of `Msg.model_dump()` in AgentScope 2.x, block ids and states included
    dumped = {
        "name": "Friday",
        "content": [
            {"type": "thinking", "thinking": "The user wants...", "id": "b0", "created_at": "x", "finished_at": None},
            {
                "type": "tool_call",
                "id": "call_9",
                "name": "ls",
                "input": "{}",
                "state": "finished",
                "suggested_rules": [],
                "created_at": "2025-03-01T10:00:00.000001",
                "finished_at": None,
            },
            {
                "type": "tool_result",
                "id": "call_9",
                "name": "ls",
                "output": [{"type": "text", "text": "a.txt", "id": "b2", "created_at": "x", "finished_at": None}],
                "state": "success",
                "metadata": {"exit_code": 0},
                "created_at": "x",
                "finished_at": None,
            },
        ],
        "role": "assistant",
        "id": "m9",
        "metadata": {"k": "v"},
        "created_at": "2025-03-01T10:00:00.000001",
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "finished_at": None,
        "finished_reason": None,
        "structured_output": None,
        "error": None,
    }
    [message] = from_agentscope([dumped])
    assert message == ContextMessage(
        id="m9",
        role=ASSISTANT,
        name="Friday",
        content=[tool_use("call_9", "ls", "{}"), tool_result("call_9", "ls", "a.txt")],
        create_time=message.create_time,
    )
    with pytest.raises(ValueError, match=re.escape("msgs[0].content[0].type: 'thinking'")):
        from_agentscope([dumped], drop_thinking=False)


def test_agentscope1_tool_use_dict_input_and_system_tool_results_round_trip() -> None:
    nested = {"city": "Zürich", "filters": {"tags": ["café", "über"], "max": 3, "on": True}, "note": None}
    msgs: list[dict[str, Any]] = [
        {"id": "a1", "name": "user", "role": "user", "content": "Cafés in Zürich?", "metadata": {}},
        {
            "id": "a2",
            "name": "Friday",
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching."},
                {"type": "tool_use", "id": "t1", "name": "search", "input": nested},
                # the model's own arguments text, which a dict cannot restore
                {"type": "tool_use", "id": "t2", "name": "search", "input": {"q": "x"}, "raw_input": '{"q":"x"}'},
            ],
            "metadata": {},
            "timestamp": "2025-03-01 09:15:30.123",
        },
        {
            "id": "a3",
            "name": "system",
            "role": "system",
            "content": [
                {"type": "tool_result", "id": "t1", "name": "search", "output": [{"type": "text", "text": "Café A"}]},
                {"type": "tool_result", "id": "t2", "name": "search", "output": [{"type": "text", "text": ""}]},
            ],
            "metadata": {},
        },
    ]
    messages = from_agentscope(msgs)
    assert messages[1].content[1] == tool_use("t1", "search", json.dumps(nested, ensure_ascii=False))
    assert json.loads(messages[1].content[1].tool_use.input_json) == nested
    assert messages[1].content[2] == tool_use("t2", "search", '{"q":"x"}')
    assert messages[1].create_time.ToDatetime(tzinfo=UTC) == datetime(2025, 3, 1, 9, 15, 30, 123000, tzinfo=UTC)
    # ReActAgent 1.x's Msg("system", [tool results], "system") is a TOOL message
    assert (messages[2].role, messages[2].name) == (TOOL, "system")
    assert to_agentscope(messages, version=1) == msgs


def test_tool_result_output_forms() -> None:
    msgs: list[dict[str, Any]] = [
        {
            "name": "Friday",
            "role": "assistant",
            "content": [
                {"type": "tool_result", "id": "s", "name": "f", "output": "plain string"},
                {
                    "type": "tool_result",
                    "id": "l",
                    "name": "f",
                    "output": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
                },
            ],
        }
    ]
    [message] = from_agentscope(msgs)
    assert message.role == TOOL
    assert [b.tool_result.output for b in message.content] == ["plain string", "one\ntwo"]
    # outputs come back as one text block, the shape AgentScope's toolkits produce
    assert [b["output"] for b in to_agentscope([message])[0]["content"]] == [
        [{"type": "text", "text": "plain string"}],
        [{"type": "text", "text": "one\ntwo"}],
    ]


@pytest.mark.parametrize(
    ("given", "version", "key", "written"),
    [
        ("2025-03-01T12:00:00.123456", 2, "created_at", "2025-03-01T12:00:00.123456"),
        ("2025-03-01T12:00:00", 2, "created_at", "2025-03-01T12:00:00"),
        ("2025-03-01T14:00:00.5+02:00", 2, "created_at", "2025-03-01T12:00:00.500000"),
        ("2025-03-01 12:00:00.123", 1, "timestamp", "2025-03-01 12:00:00.123"),
    ],
)
def test_agentscope_times(given: str, version: Literal[1, 2], key: str, written: str) -> None:
    [message] = from_agentscope([{"name": "u", "role": "user", "content": "x", key: given}])
    assert message.create_time.ToDatetime(tzinfo=UTC).replace(microsecond=0) == datetime(2025, 3, 1, 12, tzinfo=UTC)
    assert to_agentscope([message], version=version)[0][key] == written


def test_agentscope_time_with_offset_is_converted_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    [message] = from_agentscope(
        [{"name": "u", "role": "user", "content": "x", "created_at": "2025-03-01T14:00:00+02:00"}]
    )
    assert message.create_time.ToDatetime(tzinfo=plus_two) == datetime(2025, 3, 1, 14, tzinfo=plus_two)


def test_missing_ids_and_times_stay_missing() -> None:
    [message] = from_agentscope([{"name": "u", "role": "user", "content": "x", "created_at": None}])
    assert not message.id
    assert not message.HasField("create_time")
    assert to_agentscope([message]) == [{"name": "u", "role": "user", "content": [{"type": "text", "text": "x"}]}]
    assert to_agentscope([message], version=1) == [{"name": "u", "role": "user", "content": "x", "metadata": {}}]


def test_agentscope1_tool_input_that_is_not_a_json_object_keeps_its_text() -> None:
    for raw in ('{"broken": ', "[1, 2]"):
        message = ContextMessage(role=ASSISTANT, name="a", content=[tool_use("t", "f", raw)])
        [d] = to_agentscope([message], version=1)
        assert d["content"] == [{"type": "tool_use", "id": "t", "name": "f", "input": {}, "raw_input": raw}]
        assert from_agentscope([d]) == [message]


# -- across formats --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_openai_through_agentscope_and_back(version: Literal[1, 2]) -> None:
    system_prompt, messages = from_openai(OPENAI_CHAT)
    agentscope = to_agentscope(messages, version=version)
    # tool outputs live in TOOL-role-free AgentScope messages: system (1.x) or assistant (2.x)
    assert agentscope[2]["role"] == ("system" if version == 1 else "assistant")
    again = from_agentscope(agentscope)
    assert again == messages
    assert to_openai(system_prompt, again) == OPENAI_CHAT


def test_agentscope_through_openai_keeps_what_the_model_reads() -> None:
    msgs: list[dict[str, Any]] = [
        {"name": "user", "role": "user", "content": [{"type": "text", "text": "ls"}]},
        {
            "name": "Friday",
            "role": "assistant",
            "content": [
                {"type": "tool_call", "id": "c", "name": "shell", "input": '{"cmd": "ls"}'},
                {"type": "tool_result", "id": "c", "name": "shell", "output": [{"type": "text", "text": "a\nb"}]},
                {"type": "text", "text": "Two files."},
            ],
        },
    ]
    system_prompt, back = from_openai(to_openai("", from_agentscope(msgs)))
    assert system_prompt == ""
    # the 2.x reply is cut into assistant / tool / assistant, with the same content
    assert [m.role for m in back] == [USER, ASSISTANT, TOOL, ASSISTANT]
    assert [b for m in back for b in m.content] == [b for m in from_agentscope(msgs) for b in m.content]


# -- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {}}]},
            ],
            "messages[1].content[1].type: 'image_url'",
        ),
        ([{"role": "user", "content": [{"type": "input_audio"}]}], "messages[0].content[0].type: 'input_audio'"),
        ([{"role": "function", "name": "f", "content": "x"}], "messages[0].role: 'function'"),
        ([{"role": "assistant", "content": None, "function_call": {"name": "f"}}], "messages[0].function_call"),
        (
            [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}, {"role": "tool", "content": "out"}],
            "messages[2].tool_call_id: missing",
        ),
        ([{"role": "tool", "tool_call_id": "", "content": "out"}], "messages[0].tool_call_id: missing"),
        ([{"role": "user"}], "messages[0].content: missing"),
        ([{"role": "user", "content": []}], "messages[0].content: empty"),
        ([{"role": "user", "content": "x", "name": 3}], "messages[0].name"),
        ([{"role": "critic", "content": "x"}], "messages[0].role: unknown role 'critic'"),
        ([{"content": "x"}], "messages[0].role"),
        (["hello"], "messages[0]: expected a message object"),
        ([{"role": "assistant", "content": None}], "messages[0]: an assistant message needs content or tool_calls"),
        ([{"role": "assistant", "content": None, "refusal": "No."}], "messages[0].refusal"),
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}],
            "messages[0].tool_calls[0].type: 'custom'",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}],
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": ""}}]}],
            "messages[0].tool_calls[0].id: missing",
        ),
    ],
)
def test_from_openai_errors_name_the_field(messages: list[Any], field: str) -> None:
    with pytest.raises(ValueError, match=re.escape(field)):
        from_openai(messages)


@pytest.mark.parametrize(
    ("msgs", "field"),
    [
        (
            [
                {
                    "name": "u",
                    "role": "user",
                    "content": [{"type": "text", "text": "x"}, {"type": "image", "source": {}}],
                }
            ],
            "msgs[0].content[1].type: 'image'",
        ),
        (
            [{"name": "u", "role": "user", "content": [{"type": "data", "source": {}}]}],
            "msgs[0].content[0].type: 'data'",
        ),
        ([{"name": "u", "role": "user", "content": [{"type": "video"}]}], "msgs[0].content[0].type: 'video'"),
        ([{"name": "a", "role": "assistant", "content": [{"type": "hint", "hint": "x"}]}], "msgs[0].content[0].type"),
        (
            [
                {"name": "u", "role": "user", "content": "x"},
                {
                    "name": "s",
                    "role": "system",
                    "content": [
                        {
                            "type": "tool_result",
                            "id": "t",
                            "name": "f",
                            "output": [{"type": "text", "text": "x"}, {"type": "audio", "source": {}}],
                        }
                    ],
                },
            ],
            "msgs[1].content[0].output[1].type: 'audio'",
        ),
        ([{"name": "u", "role": "tool", "content": "x"}], "msgs[0].role"),
        ([{"name": "u", "role": "user", "content": []}], "msgs[0].content"),
        ([{"name": "u", "role": "user", "content": None}], "msgs[0].content"),
        ([{"name": "u", "role": "user", "content": "x", "created_at": "yesterday"}], "msgs[0].created_at"),
        ([{"name": "u", "role": "user", "content": "x", "timestamp": 17}], "msgs[0].timestamp"),
        (
            [{"name": "a", "role": "assistant", "content": [{"type": "tool_call", "name": "f"}]}],
            "msgs[0].content[0].id",
        ),
        (
            [{"name": "a", "role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": 3}]}],
            "msgs[0].content[0].input",
        ),
        ([{"name": "a", "role": "assistant", "content": [{"type": "mystery"}]}], "msgs[0].content[0].type"),
        ([{"name": 5, "role": "user", "content": "x"}], "msgs[0].name"),
    ],
)
def test_from_agentscope_errors_name_the_field(msgs: list[Any], field: str) -> None:
    with pytest.raises(ValueError, match=re.escape(field)):
        from_agentscope(msgs)


@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([user("x"), ContextMessage(role=USER)], "messages[1].content"),
        ([ContextMessage(content=[text("x")])], "messages[0].role"),
        ([ContextMessage(role=USER, content=[ContentBlock()])], "messages[0].content[0]: empty"),
        ([ContextMessage(role=USER, content=[tool_use("c", "f", "{}")])], "messages[0].content[0]: tool_use"),
        ([ContextMessage(role=TOOL, content=[text("x")])], "messages[0].content[0]: a TOOL message"),
        ([ContextMessage(role=SYSTEM, content=[tool_result("c", "f", "x")])], "messages[0].content[0]: a SYSTEM"),
    ],
)
def test_to_openai_errors_name_the_field(messages: list[ContextMessage], field: str) -> None:
    with pytest.raises(ValueError, match=re.escape(field)):
        to_openai("", messages)


def test_to_agentscope_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=re.escape("messages[0].content")):
        to_agentscope([ContextMessage(role=USER)])
    with pytest.raises(ValueError, match=re.escape("messages[0].role")):
        to_agentscope([ContextMessage(content=[text("x")])])
    # AgentScope 2.x refuses tool blocks in user messages; 1.x takes them
    mixed = ContextMessage(role=USER, name="u", content=[tool_result("c", "f", "x"), text("and")])
    with pytest.raises(ValueError, match=re.escape("messages[0].content[0]: AgentScope 2.x user messages")):
        to_agentscope([mixed])
    assert from_agentscope(to_agentscope([mixed], version=1)) == [mixed]
