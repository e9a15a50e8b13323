"""AddMemories' request digest is the one earlier servers stored: `hashed_body` builds
what `dataclasses.asdict(dataclasses.replace(m, embedding=None))` gave, so a retry
across the upgrade still matches its record, and a field added to `NewMemory` without
adding it there fails here."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from memplane.domain.models import MemoryType, NewMemory, Provenance, Scope
from memplane.server.storage.idempotency import request_hash_with_vectors
from memplane.server.writeback.requests import WriteRequest, hashed_body
from tests.strategies import json_values, texts

_times = st.one_of(st.none(), st.datetimes(timezones=st.just(UTC)))
memories = st.builds(
    NewMemory,
    content=texts,
    scope=st.builds(Scope, user_id=texts, agent_id=texts, session_id=texts),
    type=st.sampled_from(list(MemoryType)),
    name=texts,
    description=texts,
    metadata=st.dictionaries(texts, json_values, max_size=4),
    valid_from=_times,
    valid_to=_times,
    expires_at=_times,
    provenance=st.builds(Provenance, session_id=texts, message_ids=st.lists(texts, max_size=3).map(tuple)),
    embedding=st.one_of(st.none(), st.lists(st.floats(-1, 1, width=32), min_size=1, max_size=4).map(tuple)),
)


def _asdict_body(m: NewMemory) -> dict[str, object]:
    return dataclasses.asdict(dataclasses.replace(m, embedding=None))


def test_every_field_of_a_new_memory_is_in_the_hashed_body() -> None:
    m = NewMemory(content="x")
    assert set(hashed_body(m)) == {f.name for f in dataclasses.fields(NewMemory)}


def test_a_memory_with_every_field_set_hashes_as_before() -> None:
    now = datetime(2026, 12, 5, 17, 36, 35, 643900, tzinfo=UTC)
    m = NewMemory(
        content="I moved to Lisbon",
        scope=Scope(user_id="u1", agent_id="a1", session_id="s1"),
        type=MemoryType.PROCEDURAL,
        name="home",
        description="where I live",
        metadata={"tags": ["a", "b"], "nested": {"k": 1, "f": 2.5, "none": None}},
        valid_from=now,
        valid_to=now + timedelta(days=1),
        expires_at=now + timedelta(days=30),
        provenance=Provenance(session_id="s0", message_ids=("m1", "m2")),
        embedding=(0.5, -0.25),
    )
    assert hashed_body(m) == _asdict_body(m)
    before = request_hash_with_vectors("AddMemories", [_asdict_body(m)], [m.embedding])
    assert WriteRequest.adding("rid", [m]).digest == before


@settings(max_examples=150, derandomize=True, deadline=None)
@given(st.lists(memories, min_size=1, max_size=3))
def test_any_batch_hashes_as_before(items: list[NewMemory]) -> None:
    before = request_hash_with_vectors("AddMemories", [_asdict_body(m) for m in items], [m.embedding for m in items])
    assert WriteRequest.adding("rid", items).digest == before
