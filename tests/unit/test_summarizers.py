"""The summarisers of CompactMessages: the structured summary's parser and renderer, the
LLM summariser against a scripted OpenAI-compatible server (tests/fake_llm.py), and the
extractive summariser (no model)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from memplane.domain.context import ContextMessage, TextBlock, ToolResultBlock, ToolUseBlock
from memplane.domain.models import MessageRole
from memplane.server.compaction.extractive import HEADINGS as EXTRACTIVE_HEADINGS
from memplane.server.compaction.extractive import ExtractiveSummarizer
from memplane.server.compaction.llm import ChatModel, LLMSummarizer, SummarizerError
from memplane.server.compaction.sentences import split_sentences
from memplane.server.compaction.summary import (
    HEADINGS,
    StructuredSummary,
    SummaryFormatError,
    parse_answer,
    parse_summary_markdown,
    render,
)
from memplane.text.language import as_language, detect_language
from memplane.text.tokens import TokenCounter, token_counter
from tests.fake_llm import Delay, FakeLLM, HttpError

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)

SECTIONS_JSON = {
    "goal": ["Fix the login bug before Friday's release"],
    "constraints": ["Python 3.11 only", "No new dependencies"],
    "progress": ["Reproduced the KeyError", "Found the cause in src/auth/session.py"],
    "decisions": ["Store the session id in a signed cookie (simpler than Redis)"],
    "next_steps": ["Write the regression test", "Deploy to staging"],
    "critical_context": ["KeyError: 'session_id' at src/auth/session.py:42", "release date 2023-05-12"],
}
GOOD_JSON = json.dumps(SECTIONS_JSON)
CHINESE_JSON = json.dumps(
    {
        "goal": ["修复登录错误"],
        "constraints": ["只用 Python 3.11"],
        "progress": ["已定位到 src/auth/session.py"],
        "decisions": ["会话 id 存在签名 cookie 里"],
        "next_steps": ["写回归测试"],
        "critical_context": ["KeyError: 'session_id'"],
    },
    ensure_ascii=False,
)


def msg(role: MessageRole, text: str, *, name: str = "", minutes: int = 0) -> ContextMessage:
    return ContextMessage(role=role, blocks=(TextBlock(text),), name=name, created_at=T0 + timedelta(minutes=minutes))


def user(text: str, minutes: int = 0, name: str = "Caroline") -> ContextMessage:
    return msg(MessageRole.USER, text, name=name, minutes=minutes)


def assistant(text: str, minutes: int = 0) -> ContextMessage:
    return msg(MessageRole.ASSISTANT, text, minutes=minutes)


# -- language ------------------------------------------------------------------------
def test_language_is_chinese_when_ideographs_are_a_fifth_of_the_letters() -> None:
    assert detect_language(["我们用 React 重写 src/app.tsx 的路由吧"]) == "zh"
    assert detect_language(["I met 张伟 in Shenzhen last week and we talked about the launch."]) == "en"
    assert detect_language(["Please fix the login bug.", "好的"]) == "en"
    assert detect_language(["", "1234 !!!"]) == "en"
    assert as_language("zh") == "zh"
    with pytest.raises(ValueError, match="unknown language"):
        as_language("fr")


# -- the structured summary ----------------------------------------------------------
def test_parse_answer_reads_a_json_object() -> None:
    summary = parse_answer(GOOD_JSON)
    assert summary.goal == ("Fix the login bug before Friday's release",)
    assert summary.constraints == ("Python 3.11 only", "No new dependencies")
    assert summary.critical_context[0] == "KeyError: 'session_id' at src/auth/session.py:42"


def test_parse_answer_accepts_strings_variant_keys_and_empty_sections() -> None:
    answer = json.dumps(
        {
            "Goal": "Ship v2",
            "constraints_and_preferences": "- terse answers\n- no emojis",
            "progress": [],
            "key_decisions": ["use PostgreSQL"],
            "next steps": None,
            "critical_context": ["(none)"],
        }
    )
    summary = parse_answer(answer)
    assert summary == StructuredSummary(
        goal=("Ship v2",), constraints=("terse answers", "no emojis"), decisions=("use PostgreSQL",)
    )


def test_parse_answer_finds_json_wrapped_in_prose() -> None:
    answer = f"Here is the summary you asked for {{as JSON}}:\n{GOOD_JSON}\nLet me know if you need more."
    assert parse_answer(answer) == parse_answer(GOOD_JSON)


def test_parse_answer_finds_json_in_a_fence() -> None:
    answer = f"Sure!\n```json\n{json.dumps(SECTIONS_JSON, indent=2)}\n```"
    assert parse_answer(answer) == parse_answer(GOOD_JSON)


def test_parse_answer_unwraps_a_summary_wrapper_object() -> None:
    assert parse_answer(json.dumps({"summary": SECTIONS_JSON})) == parse_answer(GOOD_JSON)


def test_parse_answer_reads_english_markdown() -> None:
    answer = """# Summary
## GOAL
- Fix the login bug
## Constraints and Preferences
* Python 3.11 only
## Progress
1. Reproduced the bug
2. Found the cause
   in the session module
## Key decisions
- (none)
## Next Steps:
- Write the test
## Critical context
- KeyError: 'session_id'
"""
    summary = parse_answer(answer)
    assert summary.goal == ("Fix the login bug",)
    assert summary.constraints == ("Python 3.11 only",)
    assert summary.progress == ("Reproduced the bug", "Found the cause in the session module")
    assert summary.decisions == ()
    assert summary.critical_context == ("KeyError: 'session_id'",)


def test_parse_answer_reads_chinese_markdown() -> None:
    answer = (
        "## 目标\n- 修复登录错误\n## 约束与偏好\n- 只用 Python 3.11\n## 进展\n- 已定位\n"
        "## 关键决策\n- （无）\n## 下一步\n- 写测试\n## 关键上下文\n- src/auth/session.py\n"
    )
    summary = parse_answer(answer)
    assert summary.goal == ("修复登录错误",)
    assert summary.decisions == ()
    assert summary.critical_context == ("src/auth/session.py",)


def test_a_greeting_is_not_a_summary() -> None:
    with pytest.raises(SummaryFormatError, match="no sections"):
        parse_answer("Hello! How can I help you today?")
    with pytest.raises(SummaryFormatError, match="no sections"):
        parse_answer('{"reply": "Hello!"}')


def test_missing_or_null_sections_are_empty_not_a_failure() -> None:
    summary = parse_answer('{"goal": ["x"], "progress": null}')
    assert summary.goal == ("x",)
    assert summary.progress == summary.constraints == summary.critical_context == ()
    markdown = parse_answer("## Goal\n- x\n## Constraints\n## Progress\n## Decisions\n## Next steps\n")
    assert (markdown.goal, markdown.critical_context) == (("x",), ())
    with pytest.raises(SummaryFormatError, match="nothing in any of them"):
        parse_answer('{"goal": [], "progress": null}')


@pytest.mark.parametrize("language", ["en", "zh"])
def test_render_writes_six_headings_and_reads_back(language: str) -> None:
    lang = as_language(language)
    summary = StructuredSummary(goal=("Fix the bug",), decisions=("use PostgreSQL", "multi\nline item"))
    text = render(summary, lang)
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert headings == list(HEADINGS[lang])
    assert ("- (none)" if lang == "en" else "- （无）") in text
    assert "- multi line item" in text
    assert parse_summary_markdown(text) == StructuredSummary(
        goal=("Fix the bug",), decisions=("use PostgreSQL", "multi line item")
    )


# -- the LLM summariser against the scripted endpoint -------------------------------
@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
async def chat(fake: FakeLLM) -> AsyncIterator[ChatModel]:
    model = ChatModel(base_url=fake.base_url, api_key="test-key", model="fake-model", timeout_seconds=5.0)
    yield model
    await model.close()


def conversation() -> list[ContextMessage]:
    return [
        user("The login page throws a KeyError since yesterday. Please fix it before next Friday.", 0),
        assistant("I reproduced it: KeyError: 'session_id' at src/auth/session.py:42.", 1),
        user("Use Python 3.11 only and do not add dependencies.", 2),
        ContextMessage(
            role=MessageRole.ASSISTANT,
            blocks=(ToolUseBlock(id="call_1", name="run_tests", input_json='{"path": "tests/auth"}'),),
            created_at=T0 + timedelta(minutes=3),
        ),
        ContextMessage(
            role=MessageRole.TOOL,
            blocks=(ToolResultBlock(tool_use_id="call_1", name="run_tests", output="1 failed\n" + "x" * 10_000),),
            created_at=T0 + timedelta(minutes=3),
        ),
    ]


async def test_llm_summary_is_rendered_with_all_six_headings(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script(GOOD_JSON)
    summary = await LLMSummarizer(chat).summarize(
        conversation(), previous_summary="", language="en", max_summary_tokens=800
    )
    assert [line for line in summary.splitlines() if line.startswith("## ")] == [f"## {h}" for h in HEADINGS["en"]]
    assert "- KeyError: 'session_id' at src/auth/session.py:42" in summary

    [request] = fake.requests
    assert request["model"] == "fake-model"
    assert request["response_format"] == {"type": "json_object"}
    system, prompt = request["messages"]
    assert system["role"] == "system"
    assert "JSON" in system["content"]
    assert "800 tokens" in system["content"]
    assert "English" in system["content"]
    assert "absolute dates" in system["content"]
    assert "UPDATE" not in system["content"]
    # every message with its time, role and name; a long tool output is cut
    assert "[2023-05-08 Mon 13:56 UTC] user (Caroline): The login page throws" in prompt["content"]
    assert "[2023-05-08 Mon 13:57 UTC] assistant: I reproduced it" in prompt["content"]
    assert "[tool_use run_tests(" in prompt["content"]
    assert "more characters not shown" in prompt["content"]
    assert len(prompt["content"]) < 7_000


async def test_previous_summary_is_sent_to_be_updated(fake: FakeLLM, chat: ChatModel) -> None:
    previous = render(StructuredSummary(goal=("Migrate the billing service",), next_steps=("Fix login",)), "en")
    fake.script(GOOD_JSON)
    await LLMSummarizer(chat).summarize(
        conversation(), previous_summary=previous, language="en", max_summary_tokens=2_000
    )
    system, prompt = fake.requests[0]["messages"]
    assert "UPDATE" in system["content"]
    assert "- Migrate the billing service" in prompt["content"]
    assert prompt["content"].index("Migrate the billing") < prompt["content"].index("The login page")


async def test_chinese_conversation_gets_a_chinese_prompt_and_headings(fake: FakeLLM, chat: ChatModel) -> None:
    messages = [user("登录页面从昨天开始报 KeyError，请在下周五之前修好。", 0), assistant("我已经复现了这个问题。", 1)]
    language = detect_language(m.text() for m in messages)
    assert language == "zh"
    fake.script(CHINESE_JSON)
    summary = await LLMSummarizer(chat).summarize(
        messages, previous_summary="", language=language, max_summary_tokens=2_000
    )
    assert "Chinese" in fake.requests[0]["messages"][0]["content"]
    assert [line[3:] for line in summary.splitlines() if line.startswith("## ")] == list(HEADINGS["zh"])
    assert "- 修复登录错误" in summary


async def test_a_slow_model_is_a_timeout(fake: FakeLLM) -> None:
    model = ChatModel(base_url=fake.base_url, api_key="k", model="m", timeout_seconds=0.5)
    fake.script(Delay(3.0, GOOD_JSON))
    started = time.perf_counter()
    try:
        with pytest.raises(SummarizerError, match=r"timeout after 0\.5 s"):
            await LLMSummarizer(model).summarize(
                conversation(), previous_summary="", language="en", max_summary_tokens=500
            )
    finally:
        await model.close()
    assert time.perf_counter() - started < 2.0
    started = time.perf_counter()
    fake.close()  # the handler still waiting in its Delay does not hold up shutdown
    assert time.perf_counter() - started < 2.0


async def test_http_500_is_a_failure_with_its_status(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script(HttpError(500))
    with pytest.raises(SummarizerError, match="HTTP 500 from the LLM endpoint: scripted error"):
        await LLMSummarizer(chat).summarize(conversation(), previous_summary="", language="en", max_summary_tokens=500)


async def test_unscripted_request_fails_loudly(fake: FakeLLM, chat: ChatModel) -> None:
    with pytest.raises(SummarizerError, match=r"HTTP 500 .*no scripted reply"):
        await chat.complete([{"role": "user", "content": "hi"}], json_mode=False)


async def test_retries_recover_from_a_transient_error(fake: FakeLLM) -> None:
    model = ChatModel(base_url=fake.base_url, api_key="k", model="m", timeout_seconds=8.0, max_retries=1)
    fake.script(HttpError(503), GOOD_JSON)
    try:
        summary = await LLMSummarizer(model).summarize(
            conversation(), previous_summary="", language="en", max_summary_tokens=500
        )
    finally:
        await model.close()
    assert summary.startswith("## Goal")
    assert len(fake.requests) == 2


async def test_an_answer_without_sections_is_a_failure(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script("Hello! How can I help you today?", '{"goal": [], "progress": null}', "   ")
    summarizer = LLMSummarizer(chat)
    with pytest.raises(SummarizerError, match="no sections"):
        await summarizer.summarize(conversation(), previous_summary="", language="en", max_summary_tokens=500)
    with pytest.raises(SummarizerError, match="nothing in any of them"):
        await summarizer.summarize(conversation(), previous_summary="", language="en", max_summary_tokens=500)
    with pytest.raises(SummarizerError, match="empty answer"):
        await summarizer.summarize(conversation(), previous_summary="", language="en", max_summary_tokens=500)


async def test_a_malformed_response_is_a_failure(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script(HttpError(200, '{"object": "chat.completion", "choices": []}'), HttpError(200, "not json"))
    with pytest.raises(SummarizerError, match=r"bad response from the LLM endpoint: no choices\[0\]\.message"):
        await chat.complete([{"role": "user", "content": "hi"}], json_mode=True)
    with pytest.raises(SummarizerError, match="bad response from the LLM endpoint: body is not JSON"):
        await chat.complete([{"role": "user", "content": "hi"}], json_mode=True)


async def test_an_unreachable_endpoint_is_a_failure() -> None:
    with FakeLLM() as gone:
        base_url = gone.base_url  # a port nobody listens on once closed
    model = ChatModel(base_url=base_url, api_key="k", model="m", timeout_seconds=3.0)
    try:
        with pytest.raises(SummarizerError, match="cannot reach the LLM endpoint"):
            await model.complete([{"role": "user", "content": "hi"}], json_mode=True)
    finally:
        await model.close()


LIMITS = (200, 1_000, 10_000)


async def test_extract_asks_the_extraction_jobs_prompt_and_parses_tolerantly(fake: FakeLLM, chat: ChatModel) -> None:
    answer = (
        "Here you go:\n```json\n"
        + json.dumps(
            {
                "memories": [
                    {
                        "type": "user",
                        "name": "Python version",
                        "description": "When choosing tooling",
                        "content": "Caroline uses Python 3.11 only.",
                        "speaker": "user",
                        "message_ids": ["m2"],
                    },
                    {"type": "procedural", "name": "Session KeyError", "content": "Sign the session id cookie."},
                    {
                        "type": "TOOL",
                        "name": "run_tests",
                        "description": "",
                        "content": "Pass a path to run_tests.",
                        "speaker": "assistant",
                        "valid_from": "2023-05-08",
                    },
                    {"type": "gossip", "name": "x", "content": "dropped: unknown type"},
                    {"type": "user", "name": "empty", "content": "  "},
                    {"type": "user", "name": "dup", "content": "Caroline uses Python 3.11 only."},
                ]
            }
        )
        + "\n```"
    )
    fake.script(answer)
    messages = [ContextMessage(m.role, m.blocks, m.name, f"m{i}", m.created_at) for i, m in enumerate(conversation())]
    got = await LLMSummarizer(chat).extract(messages, language="en", limits=LIMITS)
    facts = got.extraction.facts
    assert [(f.type.value, f.name, f.speaker) for f in facts] == [
        ("user", "Python version", "user"),
        ("procedural", "Session KeyError", "user"),
        ("tool", "run_tests", "assistant"),
    ]
    assert facts[0].message_ids == ("m2",)
    assert facts[2].valid_from == datetime(2023, 5, 8, tzinfo=UTC)
    assert facts[1].description == ""
    assert got.extraction.repairs  # the fence was stripped
    assert got.model == "fake-model"
    request = fake.requests[0]
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["name"] == "memories"
    system, prompt = (m["content"] for m in request["messages"])
    assert all(f'"{word}"' in system for word in ("feedback", "procedural", "tool", "speaker", "valid_from"))
    assert "the session took place on 2023-05-08 Mon 13:59 UTC" in system
    assert "[m0] [2023-05-08 Mon 13:56 UTC] user (Caroline): The login page" in prompt
    assert '[m3] [2023-05-08 Mon 13:59 UTC] assistant: [tool_use run_tests({"path": "tests/auth"})]' in prompt
    assert "more characters not shown" in prompt  # the 10,000-character output is cut


async def test_extract_writes_in_the_language_asked_and_rejects_prose(fake: FakeLLM, chat: ChatModel) -> None:
    fake.script('{"memories": []}', "Nothing to remember here.")
    summarizer = LLMSummarizer(chat)
    got = await summarizer.extract(conversation(), language="zh", limits=LIMITS)
    assert got.extraction.facts == []
    assert "Simplified Chinese (简体中文)" in fake.requests[0]["messages"][0]["content"]
    assert "[no id]" in fake.requests[0]["messages"][1]["content"]  # messages without ids say so
    with pytest.raises(SummarizerError, match="memories"):
        await summarizer.extract(conversation(), language="en", limits=LIMITS)


# -- the extractive summariser -------------------------------------------------------
ENGLISH_CHAT = [
    "Hi! I need help planning the migration of our billing service to PostgreSQL 16.",
    "Sure. What does the billing service run on today?",
    "It runs on MySQL 5.7 on a single VM in Frankfurt. The database is about 400 GB.",
    "How much downtime can you accept during the cutover?",
    "At most fifteen minutes, and only on a Sunday night.",
    "Then logical replication with pgloader for the initial copy is a good fit.",
    "Our invoices table has 900 million rows. Is that a problem for pgloader?",
    "It works, but copy that table in parallel chunks by invoice id ranges.",
    "The finance team also wants the monthly reports to keep working.",
    "Which tool generates those reports today?",
    "Metabase, connected directly to the MySQL replica.",
    "Metabase supports PostgreSQL, so you only need to change the connection.",
    "Great. What about the stored procedures for tax calculation?",
    "There are twelve of them. Rewrite them in PL/pgSQL and test them against last year's invoices.",
    "Can we keep the old MySQL server as a fallback for a month?",
    "Yes, keep it read-only and replicate back with a trigger-based tool if needed.",
    "I prefer not to add new tools to the stack if we can avoid it.",
    "Understood, then keep the fallback as a cold snapshot instead of live replication.",
    "What monitoring should we set up on the new database?",
    "Track replication lag, connection counts, slow queries and disk usage.",
    "We use Grafana already, with Prometheus scraping our services.",
    "Then add postgres_exporter and import the standard PostgreSQL dashboard.",
    "How should we size the new instance?",
    "Start with 16 vCPUs and 64 GB of RAM, and shared_buffers at 16 GB.",
    "Our budget is 2,000 euros per month for this database.",
    "That fits a managed instance of that size in Frankfurt.",
    "Who should approve the cutover plan?",
    "Your CTO and the finance lead, since invoices are affected.",
    "The CTO is Maria Lopez and the finance lead is Tom Becker.",
    "Send them the plan with the rollback steps and the downtime window.",
    "The deploy failed yesterday because the database password expired.",
    "The deploy failed yesterday because the database password expired.",
    "Rotate the password with the secrets manager and restart the pods.",
    "Done, the pods are healthy again after the restart.",
    "Let us schedule the cutover for Sunday, June 4th at 23:00 CET.",
    "I will prepare the runbook and share it by Thursday.",
    "Please include a checklist for verifying invoice totals after the copy.",
    "Compare row counts and the sum of invoice amounts per month between both databases.",
    "Thanks, that is exactly what I needed.",
    "Good luck with the migration, and ping me if the copy stalls.",
]


def english_messages() -> list[ContextMessage]:
    return [
        user(text, minutes=i * 7, name="Dana") if i % 2 == 0 else assistant(text, minutes=i * 7)
        for i, text in enumerate(ENGLISH_CHAT)
    ]


def bullets(summary: str) -> list[str]:
    return [line for line in summary.splitlines() if line.startswith("- ")]


async def test_extractive_summary_is_in_budget_in_order_and_says_it_is_extractive() -> None:
    messages = english_messages()
    counter = token_counter("o200k_base")
    input_tokens = sum(counter.count_messages(messages))
    summary = await ExtractiveSummarizer().summarize(
        messages, previous_summary="", language="en", max_summary_tokens=250, counter=counter
    )
    assert summary.splitlines()[0] == EXTRACTIVE_HEADINGS["en"]
    assert "Extractive" in summary
    assert counter.count_text(summary) <= 250
    assert counter.count_text(summary) > 150  # the budget is used, not left empty
    assert counter.count_text(summary) < input_tokens / 2
    chosen = bullets(summary)
    assert 4 <= len(chosen) < len(ENGLISH_CHAT)
    positions = []
    for line in chosen:
        tag, sentence = line[3:].split("] ", 1)
        speaker, day = tag.split(", ")
        assert speaker in {"Dana", "assistant"}
        assert day == "2023-05-08"
        positions.append(next(i for i, text in enumerate(ENGLISH_CHAT) if sentence in text))
    assert positions == sorted(positions)  # original order


async def test_extractive_summary_never_repeats_a_sentence() -> None:
    messages = [
        *english_messages()[:6],
        user("The deploy failed because the database password expired.", 60),
        user("The deploy failed because the database password expired!", 61),
        user("the deploy failed because the database password expired.", 62),
    ]
    counter = token_counter("o200k_base")
    summary = await ExtractiveSummarizer().summarize(
        messages, previous_summary="", language="en", max_summary_tokens=2_000, counter=counter
    )
    assert sum("database password expired" in line for line in bullets(summary)) == 1
    assert len(bullets(summary)) >= 7  # a generous budget takes everything else


async def test_extractive_summary_of_a_chinese_chat_has_the_chinese_heading() -> None:
    texts = [
        "我们计划把计费服务迁移到 PostgreSQL 16。",
        "现在的数据库是 MySQL 5.7，大约 400 GB。",
        "停机时间最多十五分钟，而且只能在周日晚上。",
        "发票表有九亿行，需要按发票编号分段并行复制。",
        "财务团队希望月度报表继续可用。",
        "好的。",
        "预算是每月两千欧元。",
        "切换时间定在六月四日周日晚上十一点。",
    ]
    messages = [user(t, minutes=i, name="小王") for i, t in enumerate(texts)]
    assert detect_language(m.text() for m in messages) == "zh"
    counter = token_counter("o200k_base")
    summary = await ExtractiveSummarizer().summarize(
        messages, previous_summary="", language="zh", max_summary_tokens=120, counter=counter
    )
    assert summary.splitlines()[0] == EXTRACTIVE_HEADINGS["zh"]
    assert summary.startswith("## 摘录式摘要")
    assert counter.count_text(summary) <= 120
    assert bullets(summary)
    assert all(line.startswith("- [小王, 2023-05-08] ") for line in bullets(summary))
    assert "好的" not in summary  # a fragment, not a sentence


async def test_incremental_extractive_summary_stays_bounded_and_keeps_old_facts() -> None:
    counter = token_counter("o200k_base")
    summarizer = ExtractiveSummarizer()
    messages = english_messages()
    first = await summarizer.summarize(
        messages[:20], previous_summary="", language="en", max_summary_tokens=200, counter=counter
    )
    second = await summarizer.summarize(
        messages[20:], previous_summary=first, language="en", max_summary_tokens=200, counter=counter
    )
    assert counter.count_text(second) <= 200
    assert second.count(EXTRACTIVE_HEADINGS["en"]) == 1
    old = set(bullets(first))
    kept_old = [line for line in bullets(second) if line in old]
    assert kept_old, "central sentences of the previous summary stay candidates"
    # old sentences first (they are older), each still tagged with its speaker and day
    new_positions = [i for i, line in enumerate(bullets(second)) if line not in old]
    old_positions = [i for i, line in enumerate(bullets(second)) if line in old]
    assert new_positions, "the new messages are represented, not only the old summary"
    assert max(old_positions) < min(new_positions)


async def test_extractive_summary_reads_a_previous_llm_summary() -> None:
    previous = render(StructuredSummary(goal=("The CFO approved the vendor contract for the data warehouse",)), "en")
    counter = TokenCounter("o200k_base")
    summary = await ExtractiveSummarizer().summarize(
        english_messages()[:4], previous_summary=previous, language="en", max_summary_tokens=1_000, counter=counter
    )
    assert "- The CFO approved the vendor contract for the data warehouse" in summary
    assert "(none)" not in summary


async def test_extractive_summary_budget_below_the_heading_gives_the_heading() -> None:
    counter = token_counter("o200k_base")
    summary = await ExtractiveSummarizer().summarize(
        english_messages(), previous_summary="", language="en", max_summary_tokens=5, counter=counter
    )
    assert summary == EXTRACTIVE_HEADINGS["en"]


async def test_a_chat_of_fragments_still_gets_a_summary() -> None:
    messages = [user("Deploy it?", 0), assistant("Done.", 1), user("ok thanks", 2)]
    counter = token_counter("o200k_base")
    summary = await ExtractiveSummarizer().summarize(
        messages, previous_summary="", language="en", max_summary_tokens=500, counter=counter
    )
    assert bullets(summary) == [
        "- [Caroline, 2023-05-08] Deploy it?",
        "- [assistant, 2023-05-08] Done.",
        "- [Caroline, 2023-05-08] ok thanks",
    ]


def test_sentences_split_in_english_and_chinese() -> None:
    assert split_sentences("It works fine. Copy it in chunks! Why? ok\nNew line starts here") == [
        "It works fine.",
        "Copy it in chunks!",
        "New line starts here",
    ]
    assert split_sentences("Plan:\n- copy the invoices table\n2. then verify the totals") == [
        "copy the invoices table",
        "then verify the totals",
    ]
    assert split_sentences("Version 3.11 is fine, e.g. for the parser. Dr. Smith agreed with J. Doe today.") == [
        "Version 3.11 is fine, e.g. for the parser.",
        "Dr. Smith agreed with J. Doe today.",
    ]
    chinese = "我们计划迁移数据库。停机最多十五分钟！好的。“你确定要迁移吗？”他问道。"
    assert split_sentences(chinese) == [
        "我们计划迁移数据库。",
        "停机最多十五分钟！",
        "“你确定要迁移吗？”",
    ]
