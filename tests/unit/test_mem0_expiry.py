"""mem0's expiration dates as memplane's expire_time and back (`memplane.compat.mem0.shapes`)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from google.protobuf import timestamp_pb2

from memplane.compat.mem0 import shapes
from memplane.v1 import memory_pb2


def _item_of(expire: timestamp_pb2.Timestamp) -> dict[str, object]:
    return shapes.memory_item(memory_pb2.Memory(id="m", content="x", expire_time=expire))


@pytest.mark.parametrize("day", ["2026-12-06", "2024-02-29", "2026-12-31", "1999-01-01"])
def test_a_date_is_current_through_its_last_utc_day_and_comes_back(day: str) -> None:
    expire = shapes.expire_time(day)
    end = expire.ToDatetime(tzinfo=UTC)
    assert (end.hour, end.minute, end.second, end.microsecond) == (0, 0, 0, 0)
    assert (end.date() - date.fromisoformat(day)).days == 1
    assert _item_of(expire)["expiration_date"] == day


def test_an_expiry_at_another_moment_is_its_own_day() -> None:
    expire = timestamp_pb2.Timestamp()
    expire.FromDatetime(datetime(2026, 12, 6, 15, 30, tzinfo=UTC))
    assert _item_of(expire)["expiration_date"] == "2026-12-06"


def test_no_expiry_no_key() -> None:
    assert "expiration_date" not in shapes.memory_item(memory_pb2.Memory(id="m", content="x"))


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        (None, None),
        ("2999-01-01", "2999-01-01"),
        (date(2030, 5, 1), "2030-05-01"),
        (datetime(2030, 5, 1, 23, 59, tzinfo=UTC), "2030-05-01"),
    ],
)
def test_accepted_forms_are_mem0s(given: object, normal: str | None) -> None:
    assert shapes.expiration_date(given) == normal


@pytest.mark.parametrize(("given", "message"), [("soon", "valid date"), (20300501, "date string"), ("", "valid date")])
def test_other_forms_are_mem0s_value_errors(given: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        shapes.expiration_date(given)
