"""`memplane.server.writeback.reconcile.plan`: the model's operations checked against the facts
and memories it was shown — each fact decided once, unknown ordinals and unasked deletes
skipped with their reason, undecided facts added — and the answers' parsing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memplane.domain.models import Memory, MemoryType, Provenance, Scope
from memplane.server.llm.chat import LLMError
from memplane.server.llm.extraction import Fact, ForgetRequest, parse_extraction
from memplane.server.writeback.extraction import Operation, parse_operations
from memplane.server.writeback.reconcile import plan

T = datetime(2026, 11, 13, tzinfo=UTC)
LIMITS = (512, 1024, 32 * 1024)


def fact(i: int) -> Fact:
    return Fact(i, MemoryType.USER, f"F{i}", "", f"fact {i}", "user", None, ())


def memory(i: int) -> Memory:
    return Memory(
        id=f"00000000-0000-4000-8000-00000000000{i}", scope=Scope(), type=MemoryType.USER, name=f"M{i}",
        description="", content=f"memory {i}", metadata={}, valid_from=T, valid_to=None, expires_at=None,
        provenance=Provenance(), version=1, created_at=T, updated_at=T,
    )  # fmt: skip


FACTS, SHOWN = [fact(1), fact(2), fact(3)], [memory(1), memory(2), memory(3)]


@pytest.mark.parametrize(
    ("operations", "forget", "expected"),
    [
        (  # every kind applied; DELETE allowed by a forget request
            [Operation("SUPERSEDE", 1, 1), Operation("UPDATE", 2, 2), Operation("NOOP", 3, 2),
             Operation("DELETE", None, 3), Operation("DELETE", None, 1)],
            [ForgetRequest(1, "my address")],
            [("SUPERSEDE", ""), ("UPDATE", ""), ("NOOP", ""), ("DELETE", ""),
             ("DELETE", "[1] was already changed by an earlier operation")],
        ),
        (  # unknown ordinals and operations are skipped; the facts they named are still added
            [Operation("UPDATE", 1, 9), Operation("ADD", 7, None), Operation("MERGE", 2, 1),
             Operation("NOOP", None, 1)],
            [],
            [
                ("UPDATE", "unknown memory ordinal [9]"),
                ("ADD", "unknown fact ordinal F7"),
                ("MERGE", "unknown operation 'MERGE'"),
                ("NOOP", "no fact named"),
                ("ADD", ""), ("ADD", ""), ("ADD", ""),
            ],
        ),
        (  # no forget request: DELETE is refused; one fact, one memory decided once
            [Operation("DELETE", None, 1), Operation("ADD", 1, None), Operation("UPDATE", 1, 2),
             Operation("SUPERSEDE", 2, 2), Operation("UPDATE", 3, 2)],
            [],
            [
                ("DELETE", "DELETE without an explicit forget request in the conversation"),
                ("ADD", ""),
                ("UPDATE", "F1 was already decided by an earlier operation"),
                ("SUPERSEDE", ""),
                ("UPDATE", "[2] was already changed by an earlier operation"),
                ("ADD", ""),
            ],
        ),
    ],
)  # fmt: skip
def test_plan(operations: list[Operation], forget: list[ForgetRequest], expected: list[tuple[str, str]]) -> None:
    steps = plan(operations, FACTS, forget, SHOWN)
    assert [(s.operation, s.skipped) for s in steps] == expected
    applied_facts = [s.fact.index for s in steps if s.fact is not None and not s.skipped]
    assert sorted(applied_facts) == [1, 2, 3]  # every fact decided exactly once: none dropped, none twice


def test_answers_are_parsed_with_their_repairs_and_garbage_is_an_error() -> None:
    extraction = parse_extraction(
        '```json\n{"memories": [{"type": "user", "name": "Home", "content": "Ana lives in Lisbon",'
        ' "speaker": "assistant", "valid_from": "2026-11-02", "message_ids": ["m1", 2]},'
        ' {"type": "mood", "content": "happy today"}, {"type": "tool", "content": ""}],'
        ' "forget": [{"content": "my old number"}, {"content": ""}]}\n```',
        limits=LIMITS,
    )
    [home] = extraction.facts  # an unknown type and an empty content are dropped
    assert (home.index, home.type, home.speaker, home.message_ids) == (1, MemoryType.USER, "assistant", ("m1", "2"))
    assert home.valid_from == datetime(2026, 11, 2, tzinfo=UTC)
    assert [r.content for r in extraction.forget] == ["my old number"]
    assert extraction.repairs == ("fence",)
    operations, repairs = parse_operations('{"operations": [{"operation": "update", "fact": "F2", "memory": "[3]"}]}')
    assert operations == [Operation("UPDATE", 2, 3)]
    assert repairs == ()
    with pytest.raises(LLMError, match="memories"):
        parse_extraction("Nothing to remember.", limits=LIMITS)
    with pytest.raises(LLMError, match="operations"):
        parse_operations('{"memories": []}')
