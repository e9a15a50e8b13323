"""`memplane.convert.timestamp` computes a Timestamp from the timedelta since the epoch
instead of calling protobuf's `FromDatetime`: it must give exactly what that gives, for
every aware or naive datetime protobuf accepts (before 1970 too, where seconds are
negative and nanos still count up)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from google.protobuf import timestamp_pb2
from hypothesis import given
from hypothesis import strategies as st

from memplane.convert import timestamp

ZONES = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-11)), None])


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)), ZONES)  # noqa: DTZ001 (naive bounds)
def test_timestamp_is_protobufs_from_datetime(value: datetime, zone: timezone | None) -> None:
    value = value.replace(tzinfo=zone)
    want = timestamp_pb2.Timestamp()
    want.FromDatetime(value)
    assert timestamp(value) == want


def test_none_stays_none_and_edges_are_exact() -> None:
    assert timestamp(None) is None
    for value, seconds, nanos in [
        (datetime(1970, 1, 1, tzinfo=UTC), 0, 0),
        (datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC), -1, 999_999_000),
        (datetime(2026, 12, 5, 12, 0, 0, 1, tzinfo=UTC), 1_796_472_000, 1000),
    ]:
        assert timestamp(value) == timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
