"""`locate_violation` names the field of a request body that does not decode, across
protobuf's wire types (tests/e2e/test_wire_input.py sends such bodies over gRPC)."""

from __future__ import annotations

import struct

import pytest
from google.protobuf import message as pb_message

from memplane.errors import FieldViolation
from memplane.server.api.decoding import guarded, locate_violation
from memplane.v1 import admin_pb2, memory_pb2, retrieval_pb2, writeback_pb2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire_type: int, payload: bytes) -> bytes:
    tag = _varint(number << 3 | wire_type)
    return tag + (_varint(len(payload)) + payload if wire_type == 2 else payload)


TOP_K = _field(2, 0, _varint(5))  # SearchMemoriesRequest.top_k, a varint
MIN_SCORE = _field(3, 1, struct.pack("<d", 0.5))  # min_score, a double (fixed 64 bits)
UNKNOWN_FIXED32 = _field(90, 5, b"\x00\x00\x00\x00")
UNKNOWN_GROUP = _varint(91 << 3 | 3) + _field(1, 0, b"\x01") + _varint(91 << 3 | 4)


def _located(message: type[pb_message.Message], data: bytes) -> FieldViolation:
    with pytest.raises(pb_message.DecodeError) as caught:
        message.FromString(data)
    return locate_violation(message.DESCRIPTOR, data, caught.value)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        pytest.param(TOP_K + MIN_SCORE + _field(1, 2, b"\xff"), "queries[0]", id="after varint and fixed64"),
        pytest.param(UNKNOWN_FIXED32 + UNKNOWN_GROUP + _field(1, 2, b"\xc3"), "queries[0]", id="after unknown fields"),
        pytest.param(TOP_K + b"\x1d\x00", "min_score", id="fixed64 cut short"),
        pytest.param(TOP_K + b"\x10", "top_k", id="varint cut short"),
        pytest.param(b"\x07", "request", id="wire type 7"),
    ],
)
def test_the_field_is_named_across_wire_types(data: bytes, field: str) -> None:
    assert _located(retrieval_pb2.SearchMemoriesRequest, data).field == field


def test_a_map_value_that_is_not_utf8_names_the_map() -> None:
    entry = _field(1, 2, b"team") + _field(2, 2, b"\xff")
    data = _field(1, 2, b"ws") + _field(6, 2, entry)  # CreateWorkspaceRequest.labels = 6
    violation = _located(admin_pb2.CreateWorkspaceRequest, data)
    assert (violation.field, violation.description) == ("labels", "must be valid UTF-8")


def test_a_struct_key_that_is_not_utf8_names_the_struct_field() -> None:
    entry = _field(1, 2, b"\xff") + _field(2, 2, b"")  # a Struct.fields entry: bad key, empty Value
    memory = _field(memory_pb2.MemoryInput.DESCRIPTOR.fields_by_name["metadata"].number, 2, _field(1, 2, entry))
    data = _field(1, 2, b"") + _field(1, 2, memory)  # AddMemoriesRequest.memories = 1
    violation = _located(writeback_pb2.AddMemoriesRequest, data)
    assert (violation.field, violation.description) == ("memories[1].metadata", "must be valid UTF-8")


def test_guarded_passes_a_good_body_through() -> None:
    request = retrieval_pb2.SearchMemoriesRequest(queries=["spare key"], top_k=3)
    decoded = guarded(retrieval_pb2.SearchMemoriesRequest.FromString)(request.SerializeToString())
    assert decoded == request
