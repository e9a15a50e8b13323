"""Reading the page's requests: query parameters and JSON bodies into the client SDK's
arguments. Every bad value raises `BadRequestError` naming the field."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from starlette.requests import Request

from memplane.console.errors import BadRequestError, RefusedError
from memplane.console.jsonview import memory_type_value
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a memory's content is far less
SCOPE_FIELDS = ("user_id", "agent_id", "session_id")


class BodyTooLargeError(RefusedError):
    """A request body over `MAX_BODY_BYTES` (413, naming `body`)."""

    def __init__(self, message: str) -> None:
        super().__init__(413, "TOO_LARGE", message)


async def read_body(request: Request, *, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body, at most *limit* bytes. Raises `BodyTooLargeError` at once for a
    Content-Length over *limit* (nothing is read), and as soon as a body without one
    (chunked) passes *limit*: no more than *limit* + one chunk is ever held."""
    declared = request.headers.get("content-length", "").strip()
    if declared:
        if not (declared.isascii() and declared.isdigit()):
            raise BadRequestError(f"body: Content-Length {declared[:40]!r} is not a number")
        if len(declared.lstrip("0")) > len(str(limit)) or int(declared) > limit:
            raise BodyTooLargeError(f"body: {declared[:40]} bytes; the limit is {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"body: over {limit} bytes; the limit is {limit}")
        chunks.append(chunk)
    return b"".join(chunks)


class NonFiniteError(ValueError):
    """A JSON number that is NaN or infinite (``NaN``, ``Infinity``, ``1e400``)."""


def _no_constant(word: str) -> float:
    raise NonFiniteError(word)


def _finite_float(digits: str) -> float:
    number = float(digits)
    if not math.isfinite(number):
        raise NonFiniteError(digits)
    return number


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object. Raises `BodyTooLargeError` (413) for a body over 1 MiB
    (`read_body`), `BadRequestError` for one that is not JSON, or JSON that is not an
    object."""
    raw = await read_body(request)
    try:
        value = json.loads(raw or b"{}", parse_constant=_no_constant, parse_float=_finite_float)
    except NonFiniteError:
        raise BadRequestError("body: NaN/Infinity not allowed") from None
    except ValueError:
        raise BadRequestError("body: not JSON") from None
    except RecursionError:
        raise BadRequestError("body: nested too deeply") from None
    if not isinstance(value, dict):
        raise BadRequestError("body: must be a JSON object")
    return value


def text(source: Mapping[str, Any], field: str, *, max_chars: int = 1_000) -> str:
    """*field* of *source* as a string ("" when absent); `BadRequestError` when it is not a
    string or longer than *max_chars*."""
    value = source.get(field, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequestError(f"{field}: must be a string")
    if len(value) > max_chars:
        raise BadRequestError(f"{field}: {len(value)} characters; the limit is {max_chars}")
    return value


def integer(source: Mapping[str, Any], field: str, *, default: int, low: int, high: int) -> int:
    """*field* of *source* as an int in low..high (*default* when absent or "");
    `BadRequestError` otherwise."""
    value = source.get(field)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise BadRequestError(f"{field}: must be a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        raise BadRequestError(f"{field}: must be a whole number, not {value!r}") from None
    if not low <= number <= high:
        shown = str(number) if len(str(number)) <= 40 else f"a {len(str(number))}-digit number"
        raise BadRequestError(f"{field}: must be {low} to {high}, not {shown}")
    return number


def fraction(source: Mapping[str, Any], field: str) -> float:
    """*field* as a number from 0 to 1 (0 when absent); `BadRequestError` otherwise."""
    value = source.get(field, 0.0)
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise BadRequestError(f"{field}: must be a number from 0 to 1")  # NaN fails 0 <= value too
    return float(value)


def flag(source: Mapping[str, Any], field: str) -> bool:
    """*field* as a boolean: JSON true/false, or "1"/"true"/"0"/"false"/"" in a query."""
    value = source.get(field, False)
    if isinstance(value, bool):
        return value
    if value in ("1", "true", "on"):
        return True
    if value in ("0", "false", "off", ""):
        return False
    raise BadRequestError(f"{field}: must be true or false, not {value!r}")


def scope(source: Mapping[str, Any]) -> memory_pb2.Scope:
    """user_id, agent_id and session_id of *source* (each at most 256 characters)."""
    return memory_pb2.Scope(**{f: text(source, f, max_chars=256) for f in SCOPE_FIELDS})


def timestamp(source: Mapping[str, Any], field: str) -> timestamp_pb2.Timestamp | None:
    """*field* as a Timestamp: an ISO 8601 date ("2026-05-01", midnight UTC) or date and
    time with a zone ("2026-05-01T12:00:00Z"); None when absent. `BadRequestError` otherwise."""
    value = text(source, field, max_chars=40).strip()
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequestError(f"{field}: {value!r} is not an ISO 8601 date or time") from None
    if when.tzinfo is None:
        if len(value) > 10:
            raise BadRequestError(f"{field}: {value!r} needs a time zone (e.g. Z)")
        when = when.replace(tzinfo=UTC)
    ts = timestamp_pb2.Timestamp()
    try:
        ts.FromDatetime(when)  # in UTC: 0001-01-01T00:00:00+14:00 is before year 1
    except (OverflowError, ValueError):
        raise BadRequestError(f"{field}: {value!r} is out of range (years 1 to 9999 in UTC)") from None
    return ts


def metadata_condition(source: Mapping[str, Any], field: str = "metadata") -> filter_pb2.MetadataFilter | None:
    """*field* as one equality condition "key=value" (value: JSON if it parses — a
    number, true, "text" — else the text as it is); None when absent."""
    raw = text(source, field, max_chars=1_000).strip()
    if not raw:
        return None
    key, sep, value = raw.partition("=")
    if not sep or not key.strip():
        raise BadRequestError(f"{field}: write key=value, not {raw!r}")
    try:
        parsed = json.loads(value, parse_constant=_no_constant, parse_float=_finite_float)
    except ValueError:  # not JSON (NaN and Infinity included): the text as it is
        parsed = value
    except RecursionError:
        raise BadRequestError(f"{field}: the value is nested too deeply") from None
    try:
        literal = json_format.ParseDict(parsed, struct_pb2.Value())
    except (json_format.ParseError, OverflowError, RecursionError, ValueError):
        # "Message too deep", or an integer too large for a double
        raise BadRequestError(f"{field}: the value is nested too deeply or holds a number too large") from None
    return filter_pb2.MetadataFilter(
        condition=filter_pb2.MetadataCondition(
            key=key.strip(), operator=filter_pb2.CONDITION_OPERATOR_EQ, value=literal
        )
    )


def memory_filter(source: Mapping[str, Any]) -> filter_pb2.MemoryFilter:
    """A MemoryFilter: the scope fields, `type` (one memory type or ""), created_after /
    created_before (ISO dates or times), `metadata` ("key=value"), and the flags
    include_superseded / include_expired."""
    s = scope(source)
    word = text(source, "type", max_chars=32)
    types = [memory_type_value(word, "type")] if word else []
    return filter_pb2.MemoryFilter(
        user_id=s.user_id,
        agent_id=s.agent_id,
        session_id=s.session_id,
        types=types,  # type: ignore[arg-type]
        metadata=metadata_condition(source),
        create_time_start=timestamp(source, "created_after"),
        create_time_end=timestamp(source, "created_before"),
        include_superseded=flag(source, "include_superseded"),
        include_expired=flag(source, "include_expired"),
    )


FUSIONS: dict[str, int] = {
    ("" if value == 0 else name.removeprefix("FUSION_METHOD_").lower()): value
    for name, value in retrieval_pb2.FusionMethod.items()
}
MODES = {
    "hybrid": retrieval_pb2.SEARCH_MODE_HYBRID,
    "vector": retrieval_pb2.SEARCH_MODE_VECTOR,
    "lexical": retrieval_pb2.SEARCH_MODE_LEXICAL,
}


def choice(source: Mapping[str, Any], field: str, choices: Mapping[str, int], default: str) -> int:
    """The enum value of *field*'s word among *choices*; `BadRequestError` naming them otherwise."""
    word = text(source, field, max_chars=32) or default
    if word not in choices:
        raise BadRequestError(f"{field}: {word!r} is not one of {', '.join(repr(c) for c in choices if c)}")
    return choices[word]
