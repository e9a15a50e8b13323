"""Input checks (memplane.server.validation): each names the request field it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memplane.domain.filters import All, AnyOf, Condition, MemoryFilter, Not, Operator
from memplane.domain.models import NewMemory, Provenance, Scope
from memplane.domain.names import WORKSPACE_NAME
from memplane.errors import InvalidArgumentError
from memplane.server.settings import LimitsSettings
from memplane.server.validation import (
    IDENTITY_KEYS,
    Violations,
    check_filter,
    check_metadata,
    check_new_memory,
    check_text,
    parse_memory_id,
)

LIMITS = LimitsSettings()
DIMS = 4
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def fields_of(memory: NewMemory) -> list[str]:
    v = Violations()
    check_new_memory(v, "memories[0]", memory, LIMITS, DIMS)
    return [item.field for item in v.items]


def test_a_valid_memory_has_no_violation() -> None:
    assert (
        fields_of(
            NewMemory(
                content="I like green tea",
                scope=Scope(user_id="u1"),
                metadata={"topic": {"drinks": ["tea"]}},
                valid_from=NOW,
                valid_to=NOW + timedelta(days=1),
                expires_at=NOW + timedelta(days=2),
                provenance=Provenance("s1", ("m1",)),
                embedding=(0.5, 0.5, 0.5, 0.5),
            )
        )
        == []
    )


@pytest.mark.parametrize(
    ("memory", "field"),
    [
        (NewMemory(content=""), "memories[0].content"),
        (NewMemory(content="   \n"), "memories[0].content"),
        (NewMemory(content="x" * (32 * 1024 + 1)), "memories[0].content"),
        (NewMemory(content="a\x00b"), "memories[0].content"),
        (NewMemory(content="ok", name="n" * 257), "memories[0].name"),
        (NewMemory(content="ok", description="d" * 1025), "memories[0].description"),
        (NewMemory(content="ok", scope=Scope(user_id="u" * 129)), "memories[0].scope.user_id"),
        (NewMemory(content="ok", scope=Scope(session_id="s\x00")), "memories[0].scope.session_id"),
        (NewMemory(content="ok", valid_from=NOW, valid_to=NOW - timedelta(seconds=1)), "memories[0].valid_to_time"),
        (NewMemory(content="ok", valid_from=NOW, valid_to=NOW), "memories[0].valid_to_time"),
        (NewMemory(content="ok", expires_at=datetime(2025, 1, 1)), "memories[0].expire_time"),  # noqa: DTZ001
        (NewMemory(content="ok", embedding=(1.0, 0.0)), "memories[0].embedding"),
        (NewMemory(content="ok", embedding=(0.0, 0.0, 0.0, 0.0)), "memories[0].embedding"),
        (NewMemory(content="ok", embedding=(float("nan"), 1.0, 0.0, 0.0)), "memories[0].embedding"),
        (NewMemory(content="ok", embedding=(1.0, float("-inf"), 0.0, float("inf"))), "memories[0].embedding"),
        (NewMemory(content="ok", metadata={"user_id": "victim"}), "memories[0].metadata"),
        (NewMemory(content="ok", provenance=Provenance("s", ("m" * 129,))), "memories[0].provenance.message_ids[0]"),
    ],
)
def test_each_bad_field_is_named(memory: NewMemory, field: str) -> None:
    assert fields_of(memory) == [field]


def test_finite_embedding_values_whose_sum_overflows_are_finite() -> None:
    # The finiteness check sums first; a sum past the float range is not a non-finite value
    # (such a vector is refused for its length: pgvector's float32 cosine of it is NaN).
    v = Violations()
    check_new_memory(v, "memories[0]", NewMemory(content="ok", embedding=(1e308, 1e308, -1.0, 0.5)), LIMITS, DIMS)
    assert [item.field for item in v.items] == ["memories[0].embedding"]
    assert "length" in v.items[0].description
    assert fields_of(NewMemory(content="ok", embedding=(1e15, 0.0, -1.0, 0.5))) == []  # the bound itself


def test_every_violation_is_reported_at_once() -> None:
    fields = fields_of(NewMemory(content="", name="n" * 300, metadata={"agent_id": "x"}))
    assert fields == ["memories[0].content", "memories[0].name", "memories[0].metadata"]


def test_content_limit_counts_utf8_bytes_not_characters() -> None:
    v = Violations()
    check_text(v, "f", "中" * (32 * 1024 // 3), 32 * 1024)  # 3 bytes each: just under
    assert v.items == []
    check_text(v, "f", "中" * (32 * 1024 // 3 + 1), 32 * 1024)
    assert [i.field for i in v.items] == ["f"]
    assert "bytes" in v.items[0].description


@pytest.mark.parametrize("key", sorted(IDENTITY_KEYS))
def test_identity_keys_are_refused_in_metadata(key: str) -> None:
    v = Violations()
    check_metadata(v, "m", {key: "someone", "ok": 1}, LIMITS)
    assert [i.field for i in v.items] == ["m"]
    assert key in v.items[0].description


@pytest.mark.parametrize(
    ("metadata", "path"),
    [
        ({"workspace_key": 7}, "workspace_key"),
        ({"profile": {"User_Id": "victim"}}, "profile.User_Id"),
        ({"people": [{"ok": 1}, {"tenant_id": "t"}]}, "people[1].tenant_id"),
    ],
)
def test_identity_keys_are_refused_at_any_depth(metadata: dict[str, object], path: str) -> None:
    v = Violations()
    check_metadata(v, "m", metadata, LIMITS)
    assert [i.field for i in v.items] == ["m"]
    assert path in v.items[0].description


def test_nested_metadata_without_identity_keys_is_accepted() -> None:
    v = Violations()
    check_metadata(v, "m", {"profile": {"name": "x", "tags": [{"user": "not an identity key"}]}}, LIMITS)
    assert v.items == []


def test_metadata_size_limit_is_exact() -> None:
    # {"k":"…"} is 8 bytes of JSON around the value.
    at_limit = {"k": "x" * (LIMITS.max_metadata_bytes - 8)}
    v = Violations()
    check_metadata(v, "m", at_limit, LIMITS)
    assert v.items == []
    check_metadata(v, "m", {"k": "x" * (LIMITS.max_metadata_bytes - 7)}, LIMITS)
    assert [i.field for i in v.items] == ["m"]


def test_metadata_depth_limit() -> None:
    five: dict[str, object] = {"a": {"b": {"c": {"d": {"e": 1}}}}}
    six: dict[str, object] = {"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}
    v = Violations()
    check_metadata(v, "m", five, LIMITS)
    assert v.items == []
    check_metadata(v, "m", six, LIMITS)
    assert [i.field for i in v.items] == ["m"]
    assert "levels" in v.items[0].description


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_metadata_numbers_must_be_finite(bad: float) -> None:
    v = Violations()
    check_metadata(v, "m", {"x": [1, {"y": bad}]}, LIMITS)
    assert [i.field for i in v.items] == ["m"]


def test_memory_id_is_canonicalised_or_refused() -> None:
    v = Violations()
    assert parse_memory_id(v, "id", "0A1B2C3D-0000-4000-8000-00000000000F") == "0a1b2c3d-0000-4000-8000-00000000000f"
    assert v.items == []
    assert parse_memory_id(v, "id", "not-a-uuid") == ""
    assert parse_memory_id(v, "id", "") == ""
    assert [i.field for i in v.items] == ["id", "id"]


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        (Condition(("tags",), Operator.IN, "a"), "filter.metadata.condition.value"),
        (Condition(("n",), Operator.GT, [1]), "filter.metadata.condition.value"),
        (Condition(("n",), Operator.LT, True), "filter.metadata.condition.value"),
        (Condition(("n",), Operator.NE, None), "filter.metadata.condition.value"),
        (Condition(("a", ""), Operator.EQ, 1), "filter.metadata.condition.key"),
        (Condition(("a", "b", "c", "d", "e", "f"), Operator.EQ, 1), "filter.metadata.condition.key"),
        (All(()), "filter.metadata.all.filters"),
        (
            AnyOf((Condition(("a",), Operator.EQ, 1), Condition(("b",), Operator.IN, 2))),
            "filter.metadata.any.filters[1].condition.value",
        ),
        (Not(Not(Not(Not(Not(Condition(("a",), Operator.EXISTS)))))), "filter.metadata.not.not.not.not.not"),
    ],
)
def test_filter_violations_name_the_path_inside_the_expression(expr: object, field: str) -> None:
    v = Violations()
    check_filter(v, "filter", MemoryFilter(metadata=expr), LIMITS)  # type: ignore[arg-type]
    assert [i.field for i in v.items] == [field]


def test_filter_condition_count_is_limited() -> None:
    many = All(tuple(AnyOf(tuple(Condition((f"k{i}_{j}",), Operator.EXISTS) for j in range(5))) for i in range(13)))
    v = Violations()
    check_filter(v, "filter", MemoryFilter(metadata=many), LIMITS)  # 65 conditions
    assert [i.field for i in v.items] == ["filter.metadata"]
    assert "65" in v.items[0].description


def test_raise_if_any_carries_every_violation() -> None:
    v = Violations()
    v.raise_if_any()  # nothing to raise
    v.add("a", "bad")
    v.add("b", "worse")
    with pytest.raises(InvalidArgumentError) as caught:
        v.raise_if_any()
    assert [x.field for x in caught.value.violations] == ["a", "b"]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a", True),
        ("team-7", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("7team", False),
        ("team-", False),
        ("team\n", False),
        ("Team", False),
        ("te_am", False),
        ("", False),
    ],
)
def test_workspace_names_are_dns_labels(name: str, ok: bool) -> None:
    assert bool(WORKSPACE_NAME.match(name)) is ok
