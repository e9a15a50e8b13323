"""CheckContext and PrepareContext over gRPC: exact token counts, the compact/keep split
and its pair rules, ReMe's threshold, and the one-call pre-reasoning hook."""

from __future__ import annotations

import pytest
import quicktok
from google.protobuf import duration_pb2

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError, MessageTooLargeError
from memplane.v1 import admin_pb2, compaction_pb2
from tests.fix_server import TestWorkspace, WorkspaceFactory
from tests.support import fields, text_message, tool_call, tool_output

ENGLISH = (
    "We compared three hosting providers for the staging cluster and settled on the one "
    "with the cheapest egress, because the nightly backups move about forty gigabytes. "
)


def chat(turns: int, words: str = ENGLISH) -> list[compaction_pb2.ContextMessage]:
    """*turns* messages alternating user / assistant, each distinct."""
    roles = ("user", "assistant")
    return [text_message(roles[i % 2], f"Turn {i + 1}. {words}", id=f"m{i + 1}") for i in range(turns)]


async def test_token_counts_are_exact_for_the_encoding(workspace: TestWorkspace) -> None:
    messages = [
        text_message("user", "Wie spät ist es in 東京? 🙂", name="Ada"),
        tool_call("call_1", "clock", '{"tz": "Asia/Tokyo"}'),
        tool_output("call_1", "2026-11-30T11:19:00+09:00"),
    ]
    for encoding in ("cl100k_base", "o200k_base", "qwen3"):
        split = await workspace.client.check_context(
            messages, system_prompt="You are terse.", previous_summary="## Goal\n- tell time", encoding=encoding
        )
        enc = quicktok.get_encoding(encoding)

        def n(text: str, enc: quicktok.Tokenizer = enc) -> int:
            return len(enc.encode(text))

        # OpenAI cookbook framing: 3 tokens per message, 1 more with a name.
        assert list(split.message_tokens) == [
            3 + n("Wie spät ist es in 東京? 🙂") + 1 + n("Ada"),
            3 + n("clock") + n('{"tz": "Asia/Tokyo"}'),
            3 + n("2026-11-30T11:19:00+09:00"),
        ]
        assert split.system_prompt_tokens == n("You are terse.")
        assert split.previous_summary_tokens == n("## Goal\n- tell time")
        assert split.total_tokens == sum(split.message_tokens) + split.system_prompt_tokens + (
            split.previous_summary_tokens
        )
        assert split.encoding == encoding
        assert not split.needs_compaction
        assert split.keep_from_index == 0


async def test_the_workspace_default_encoding_applies_when_the_request_names_none(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient, server: str
) -> None:
    ws = await workspace_factory()
    assert ws.info.token_encoding == "o200k_base"
    split = await ws.client.check_context(chat(2))
    assert split.encoding == "o200k_base"
    name = f"{ws.name}-cl"
    info = await admin_client.create_workspace(name, token_encoding="cl100k_base")
    try:
        assert info.token_encoding == "cl100k_base"
        key = await admin_client.create_api_key(name, "test")
        async with AsyncMemplaneClient(server, key.api_key) as other:
            split = await other.check_context(chat(2))
        assert split.encoding == "cl100k_base"
    finally:
        await admin_client.delete_workspace(name)
    with pytest.raises(InvalidArgumentError) as caught:
        await admin_client.create_workspace(f"{ws.name}-bad", token_encoding="gpt2")
    assert fields(caught.value) == ["token_encoding"]


async def test_split_walks_back_from_the_newest_until_the_reserve(workspace: TestWorkspace) -> None:
    messages = chat(20)
    counts = list((await workspace.client.check_context(messages)).message_tokens)
    reserve = sum(counts[-4:])  # exactly the last four messages fit
    split = await workspace.client.check_context(messages, threshold_tokens=reserve + 1, reserve_tokens=reserve)
    assert split.needs_compaction
    assert split.valid
    assert split.keep_from_index == 16
    assert split.kept_tokens == reserve
    assert not split.over_reserve
    assert split.threshold_tokens == reserve + 1


async def test_the_default_threshold_is_remes(workspace: TestWorkspace) -> None:
    split = await workspace.client.check_context(chat(2))
    assert split.threshold_tokens == int(128_000 * 0.7 * 0.95)


async def test_c006_a_tool_call_is_kept_with_its_result_and_the_question(workspace: TestWorkspace) -> None:
    messages = chat(27)  # turns 1-27
    messages.append(tool_call("call_28", "search_docs", '{"q": "egress pricing"}', id="m28"))
    messages.append(tool_output("call_28", "Egress is billed at $0.01 per GB after the first 100 GB.", id="m29"))
    messages.append(text_message("user", "So what will the backups cost per month?", id="m30"))
    counts = list((await workspace.client.check_context(messages)).message_tokens)
    reserve = counts[28] + counts[29]  # room for turns 29-30 only
    split = await workspace.client.check_context(messages, threshold_tokens=200, reserve_tokens=reserve)
    assert split.needs_compaction
    assert split.valid
    # Turn 28 (the tool_use) is pulled in with its result; turn 27 is the user message it
    # answers, so it comes too: the kept part starts at a user turn.
    assert split.keep_from_index == 26
    assert any("call_28" in p for p in split.problems)  # the move is reported


async def test_a_user_turn_is_not_split_from_the_assistant_reply(workspace: TestWorkspace) -> None:
    messages = chat(10)
    counts = list((await workspace.client.check_context(messages)).message_tokens)
    # Room for the last three messages: a boundary before message 8 (assistant) would
    # separate it from user message 7, so 7 comes along.
    reserve = sum(counts[-3:])
    split = await workspace.client.check_context(messages, threshold_tokens=reserve + 1, reserve_tokens=reserve)
    assert split.keep_from_index == 6
    assert split.over_reserve  # the pair costs more than the reserve; still kept whole


async def test_the_newest_user_message_is_always_kept_even_over_the_reserve(workspace: TestWorkspace) -> None:
    messages = chat(6)
    messages.append(text_message("user", "Please review this log:\n" + "ERROR disk full on /var/lib/pg\n" * 400))
    split = await workspace.client.check_context(messages, threshold_tokens=100, reserve_tokens=50)
    assert split.keep_from_index == 6
    assert split.over_reserve
    assert split.kept_tokens == split.message_tokens[6] > 50


async def test_a_tool_result_before_its_call_across_the_split_is_reported_invalid(workspace: TestWorkspace) -> None:
    messages = [
        text_message("user", "start"),
        tool_output("call_x", "result that arrived before its call " * 20),
        text_message("assistant", "filler " * 50),
        tool_call("call_x", "lookup"),
        text_message("user", "next question"),
    ]
    counts = list((await workspace.client.check_context(messages)).message_tokens)
    reserve = sum(counts[-2:])
    split = await workspace.client.check_context(messages, threshold_tokens=reserve + 1, reserve_tokens=reserve)
    assert not split.valid
    assert any("call_x" in p for p in split.problems)


async def test_bad_context_requests_name_the_field(workspace: TestWorkspace) -> None:
    client = workspace.client
    bad_role = compaction_pb2.ContextMessage(content=[compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock())])
    cases: list[tuple[dict[str, object], list[str]]] = [
        ({"messages": chat(1), "encoding": "gpt2"}, ["encoding"]),
        ({"messages": [chat(1)[0], bad_role]}, ["messages[1].role"]),
        ({"messages": [compaction_pb2.ContextMessage(role=1)]}, ["messages[0].content"]),
        (
            {"messages": [compaction_pb2.ContextMessage(role=3, content=[compaction_pb2.ContentBlock()])]},
            ["messages[0].content[0]"],
        ),
        ({"messages": [tool_call("", "t")]}, ["messages[0].content[0].tool_use.id"]),
        ({"messages": [tool_output("c", "a\x00b")]}, ["messages[0].content[0].tool_result.output"]),
        ({"messages": [text_message("user", "hi", id="#1")]}, ["messages[0].id"]),
        ({"messages": chat(1), "reserve_tokens": -1}, ["reserve_tokens"]),
    ]
    for request, expected in cases:
        messages = request.pop("messages")
        with pytest.raises(InvalidArgumentError) as caught:
            await client.check_context(messages, **request)  # type: ignore[arg-type]
        assert fields(caught.value) == expected, request


# -- PrepareContext ----------------------------------------------------------------------
async def test_prepare_context_under_the_threshold_changes_nothing(workspace: TestWorkspace) -> None:
    messages = chat(8)
    reply = await workspace.client.prepare_context(messages, system_prompt="Be brief.", previous_summary="")
    assert list(reply.messages) == messages
    assert reply.summary == ""
    assert not reply.split.needs_compaction
    assert not reply.HasField("compaction")


async def test_prepare_context_compacts_older_messages_with_remes_threshold(workspace: TestWorkspace) -> None:
    messages = chat(60)
    probe = await workspace.client.check_context(messages)
    total = probe.total_tokens
    # Window chosen so the messages exceed max_input_tokens * 0.7 * 0.95 by a margin.
    window = int(total / (0.7 * 0.95) * 0.5)
    reply = await workspace.client.prepare_context(
        messages, system_prompt="Be brief.", max_input_tokens=window, reserve_tokens=400
    )
    assert reply.split.needs_compaction
    assert reply.split.threshold_tokens == int(window * 0.7 * 0.95)
    k = reply.split.keep_from_index
    assert 0 < k < 60
    assert list(reply.messages) == messages[k:]
    assert reply.compaction.compacted
    assert reply.compaction.method == compaction_pb2.SUMMARY_METHOD_EXTRACTIVE  # this server has no LLM
    assert reply.compaction.compacted_message_count == k
    assert reply.summary == reply.compaction.summary
    assert reply.summary
    assert reply.compaction.summary_tokens <= 2_000


def distinct_chat(turns: int) -> list[compaction_pb2.ContextMessage]:
    """*turns* messages alternating user / assistant, every sentence different (numbers,
    names and places vary), so no two candidate sentences are repeats."""
    roles = ("user", "assistant")
    places = ("Lisbon", "Porto", "Osaka", "Denver", "Tallinn", "Recife", "Leeds")
    return [
        text_message(
            roles[i % 2],
            f"On day {i + 1} the backup of cluster {i * 7 + 3} in {places[i % 7]} moved {i * 13 + 40} gigabytes."
            f" Runner {i % 5} rebuilt image {i * 31 + 11} for team {places[(i * 3) % 7]} in {i + 9} minutes.",
            id=f"m{i + 1}",
        )
        for i in range(turns)
    ]


async def test_prepare_context_without_an_llm_makes_no_model_call(
    workspace_factory: WorkspaceFactory, admin_client: AsyncMemplaneClient
) -> None:
    # The embedding quota charges every text sent to the embedder (cache hits included):
    # the extractive summary scores its sentences by their words, so it embeds none, and
    # a workspace whose quota would not cover them still gets its summary.
    ws = await workspace_factory(quotas=admin_pb2.WorkspaceQuotas(max_embedding_tokens_per_day=20))
    messages = distinct_chat(80)
    reply = await ws.client.prepare_context(
        messages, max_input_tokens=4_000, summarizer=compaction_pb2.SUMMARIZER_CHOICE_EXTRACTIVE
    )
    assert reply.compaction.compacted, reply.compaction.failure
    assert reply.compaction.method == compaction_pb2.SUMMARY_METHOD_EXTRACTIVE
    assert reply.compaction.compacted_message_count == reply.split.keep_from_index > 40
    assert reply.summary.count("\n- ") >= 5
    compacted = await ws.client.compact_messages(messages[:50], max_summary_tokens=300)
    assert compacted.compacted, compacted.failure
    assert (await admin_client.get_workspace_usage(ws.name)).embedding_tokens_today == 0


async def test_prepare_context_compacts_a_span_of_thousands_of_sentences(workspace: TestWorkspace) -> None:
    # 2,400 distinct sentences (~47k tokens): far more text than the summariser splits and
    # scores on the event loop, so it runs in a worker thread; the reply is the same kind.
    messages = distinct_chat(1_200)
    reply = await workspace.client.prepare_context(
        messages, max_input_tokens=128_000, compact_ratio=0.3, summarizer=compaction_pb2.SUMMARIZER_CHOICE_EXTRACTIVE
    )
    assert reply.split.needs_compaction
    assert reply.compaction.compacted, reply.compaction.failure
    k = reply.split.keep_from_index
    assert list(reply.messages) == messages[k:]
    assert k > 600
    assert 0 < reply.compaction.summary_tokens <= 2_000
    bullets = [line for line in reply.summary.splitlines() if line.startswith("- ")]
    assert len(bullets) == len(set(bullets)) >= 20
    texts = {m.content[0].text.text for m in messages[:k]}
    assert all(
        any(line.removeprefix("- [user] ").removeprefix("- [assistant] ") in t for t in texts) for line in bullets
    )


async def test_prepare_context_does_not_compact_across_an_invalid_split(workspace: TestWorkspace) -> None:
    messages = [
        text_message("user", "start"),
        tool_output("call_x", "early result " * 200),
        text_message("assistant", "filler " * 200),
        tool_call("call_x", "lookup"),
        text_message("user", "next question"),
    ]
    reply = await workspace.client.prepare_context(messages, max_input_tokens=200, reserve_tokens=20)
    assert not reply.split.valid
    assert list(reply.messages) == messages  # nothing dropped
    assert not reply.HasField("compaction")


async def test_prepare_context_rejects_bad_knobs(workspace: TestWorkspace) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.prepare_context(chat(2), compact_ratio=1.5)
    assert fields(caught.value) == ["compact_ratio"]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.prepare_context(chat(2), write_memories=True)
    assert fields(caught.value) == ["scope.session_id"]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.prepare_context(
            chat(2), tool_result_limits=compaction_pb2.ToolResultLimits(old_max_bytes=-5)
        )
    assert fields(caught.value) == ["tool_result_limits.old_max_bytes"]


async def test_a_request_over_the_grpc_message_limit_is_reported_as_such(workspace: TestWorkspace) -> None:
    huge = text_message("user", "x" * (17 * 1024 * 1024))  # over the default 16 MiB
    with pytest.raises(MessageTooLargeError, match="larger than max"):
        await workspace.client.check_context([huge])


async def test_a_reserve_not_below_the_threshold_is_refused(workspace: TestWorkspace) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.check_context(chat(4), threshold_tokens=500, reserve_tokens=500)
    assert fields(caught.value) == ["reserve_tokens"]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.prepare_context(chat(4), max_input_tokens=5000, reserve_tokens=100_000)
    assert fields(caught.value) == ["reserve_tokens"]


async def test_repeated_message_ids_are_refused(workspace: TestWorkspace) -> None:
    messages = [text_message("user", "first", id="same"), text_message("assistant", "second", id="same")]
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.check_context(messages)
    assert fields(caught.value) == ["messages[1].id"]


async def test_text_that_looks_like_special_tokens_is_counted_as_text(workspace: TestWorkspace) -> None:
    text = "GPT-2 ends documents with <|endoftext|> and chat templates use <|im_start|> markers."
    split = await workspace.client.check_context([text_message("user", text)], previous_summary=f"- {text}")
    enc = quicktok.get_encoding("o200k_base")
    assert split.previous_summary_tokens == len(enc.encode_ordinary(f"- {text}"))
    result = await workspace.client.compact_messages(
        [text_message("user", text), text_message("assistant", "Noted, the markers are plain text here.")],
        previous_summary=f"- {text}",
    )
    assert result.compacted  # no summariser failure on special-token text


async def test_a_small_compact_ratio_still_compacts_under_the_threshold(workspace: TestWorkspace) -> None:
    messages = chat(120)
    reply = await workspace.client.prepare_context(messages, max_input_tokens=20_000, compact_ratio=0.1)
    threshold = reply.split.threshold_tokens
    assert threshold == int(20_000 * 0.1 * 0.95)
    assert reply.compaction.compacted
    after = await workspace.client.check_context(
        list(reply.messages), previous_summary=reply.summary, threshold_tokens=threshold
    )
    assert not after.needs_compaction  # the default reserve and summary budget fit the threshold


async def test_prepare_context_names_its_own_tool_limit_fields(workspace: TestWorkspace) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await workspace.client.prepare_context(
            chat(2), tool_result_limits=compaction_pb2.ToolResultLimits(retention=duration_pb2.Duration(nanos=1000))
        )
    assert fields(caught.value) == ["tool_result_limits.retention"]
