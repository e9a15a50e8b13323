"""hypothesis strategies shared by the fuzz tests: text with the characters that broke
SQL or protobuf before (NUL, `%`, quotes, backslashes, CJK), JSON values with non-finite
numbers, and Timestamps past their valid range."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import strategies as st

_TEXT = st.characters(exclude_categories=("Cs",))  # protobuf strings cannot hold lone surrogates
_TRICKY = ("", "%", "%s", "%%", "_", "'", "\\", "a%b", "\x00", "topic", "n", "tags", "nested.k", "é", "中文")
texts = st.one_of(st.sampled_from(_TRICKY), st.text(_TEXT, max_size=24))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**63), 2**63),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=8,
)


def to_value(data: Any) -> struct_pb2.Value:
    """A google.protobuf.Value of a JSON-like value (numbers as doubles, as on the wire)."""
    out = struct_pb2.Value()
    if data is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(data, bool):
        out.bool_value = data
    elif isinstance(data, int | float):
        out.number_value = float(data)
    elif isinstance(data, str):
        out.string_value = data
    elif isinstance(data, list):
        out.list_value.values.extend(to_value(v) for v in data)
    else:
        for k, v in data.items():
            out.struct_value.fields[k].CopyFrom(to_value(v))
    return out


timestamps = st.builds(Timestamp, seconds=st.integers(-(2**40), 2**40), nanos=st.integers(-5, 10**9 + 5))
