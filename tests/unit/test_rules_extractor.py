"""The no-LLM extractor (`memplane.server.writeback.rules`): which sentences are first-person
statements, which attribute each one sets, and what is skipped."""

from __future__ import annotations

import pytest

from memplane.domain.models import ConversationMessage, MemoryType, MessageRole
from memplane.server.writeback.rules import MAX_FACTS, statements


def user(text: str, id: str = "m1") -> ConversationMessage:
    return ConversationMessage(content=text, role=MessageRole.USER, id=id)


@pytest.mark.parametrize(
    ("text", "name", "attribute"),
    [
        ("I moved to Lisbon in March.", "residence", "residence"),
        ("Well, I live in Whitefield now.", "residence", "residence"),
        ("I'm living in Electronic City", "residence", "residence"),
        ("I work at Acme as a data engineer.", "workplace", "workplace"),
        ("My name is Ana.", "name", "name"),
        ("My favourite colour is green.", "favourite colour", "my:favourite colour"),
        ("I like hiking in the hills.", "preference", None),
        ("I don't like coffee.", "preference", None),
        ("I'm a vegetarian.", "identity", None),
        ("I am 34 years old.", "identity", None),
        ("It rained all day, but I love the sound of it.", "preference", None),
        ("我搬到上海了。", "residence", "residence"),
        ("我住在北京。", "residence", "residence"),
        ("我在阿里巴巴工作。", "workplace", "workplace"),
        ("我叫小明。", "name", "name"),
        ("我的生日是五月三日。", "生日", "my:生日"),
        ("我喜欢喝绿茶。", "preference", None),
        ("我是一名老师。", "identity", None),
    ],
)
def test_a_first_person_statement_is_one_user_fact(text: str, name: str, attribute: str | None) -> None:
    (found,) = statements([user(text)])
    assert found.fact.type is MemoryType.USER
    assert found.fact.speaker == "user"
    assert found.fact.content == text.strip()
    assert found.fact.name == name
    assert found.attribute == attribute
    assert found.fact.message_ids == ("m1",)


@pytest.mark.parametrize(
    "text",
    [
        "Do you think I should move to Lisbon?",  # a question
        "If I moved to Lisbon I would learn Portuguese.",  # a conditional
        "You said I like hiking.",  # reported speech
        "The weather was nice and we walked a lot.",  # not about oneself
        "我应该搬到上海吗？",  # a question
        "如果我搬到上海，我会学上海话。",  # a conditional
        "x" * 301 + " I like hiking.",  # a pasted paragraph, not a statement
    ],
)
def test_what_is_not_a_statement_yields_nothing(text: str) -> None:
    assert statements([user(text)]) == []


def test_only_the_users_messages_and_each_sentence_once() -> None:
    messages = [
        ConversationMessage(content="I live in Porto.", role=MessageRole.ASSISTANT, id="a1"),  # not the user
        user("I live in Lisbon. I like surfing! i like   SURFING!", id="u1"),
        user("I like surfing!", id="u2"),
    ]
    found = statements(messages)
    assert [f.fact.content for f in found] == ["I live in Lisbon.", "I like surfing!"]
    assert [f.fact.index for f in found] == [1, 2]
    assert [f.fact.message_ids for f in found] == [("u1",), ("u1",)]


def test_at_most_max_facts() -> None:
    text = " ".join(f"I like sport number {i}." for i in range(MAX_FACTS + 5))
    assert len(statements([user(text)])) == MAX_FACTS


def test_a_named_speakers_attribute_is_their_own() -> None:
    ana = ConversationMessage(content="I live in Lisbon.", role=MessageRole.USER, id="d1", name="Ana")
    ben = ConversationMessage(content="I live in Porto.", role=MessageRole.USER, id="d2", name="Ben")
    found = statements([ana, ben])
    assert [f.attribute for f in found] == ["Ana/residence", "Ben/residence"]
    descriptions = [f.fact.description for f in found]
    assert descriptions == ["Ana's residence, as they said it", "Ben's residence, as they said it"]
