"""Input checks shared by every service. Each check appends `FieldViolation`s naming the
request field (proto field names, e.g. ``memories[2].metadata``); callers raise one
`InvalidArgumentError` with all of them, before anything is written."""

from __future__ import annotations

import json
import math
import unicodedata
import uuid
from datetime import datetime
from typing import Any

from memplane.domain.filters import All, AnyOf, Condition, MemoryFilter, MetadataExpr, Not, Operator
from memplane.domain.models import NewMemory, Scope
from memplane.domain.names import WORKSPACE_NAME
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.server.settings import LimitsSettings

# Keys that decide who a memory belongs to; they live in `scope`, never in metadata
# (shared case C004: identity keys in metadata moved memories into another scope).
IDENTITY_KEYS = frozenset(
    {"user_id", "agent_id", "session_id", "workspace", "workspace_id", "workspace_key", "run_id", "tenant_id"}
)


class Violations:
    """Collects violations; `raise_if_any()` raises them as one InvalidArgumentError."""

    def __init__(self) -> None:
        self.items: list[FieldViolation] = []

    def add(self, field: str, description: str) -> None:
        self.items.append(FieldViolation(field, description))

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidArgumentError(self.items)


def check_text(v: Violations, field: str, value: str, max_bytes: int, *, required: bool = False) -> None:
    """Length in UTF-8 bytes, presence, and no NUL characters (PostgreSQL text refuses them)."""
    size = len(value.encode("utf-8", errors="surrogatepass"))
    if required and not _visible(value):
        v.add(field, "must not be empty (or only whitespace and invisible characters)")
    elif size > max_bytes:
        v.add(field, f"is {size} bytes; the limit is {max_bytes} bytes")
    elif "\x00" in value:
        v.add(field, "must not contain NUL characters")


def check_scope(v: Violations, field: str, scope: Scope, limits: LimitsSettings) -> None:
    for name in ("user_id", "agent_id", "session_id"):
        check_text(v, f"{field}.{name}", getattr(scope, name), limits.max_id_bytes)


def check_time(v: Violations, field: str, value: datetime | None) -> None:
    if value is not None and value.tzinfo is None:
        v.add(field, "must be timezone-aware (UTC)")


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(x) for x in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(x) for x in value), default=0)
    return 0


def _count_keys(value: Any) -> int:
    """Keys of the JSON objects in *value*, at every level."""
    if isinstance(value, dict):
        return len(value) + sum(_count_keys(x) for x in value.values())
    if isinstance(value, list):
        return sum(_count_keys(x) for x in value)
    return 0


def _count_values(value: Any) -> int:
    """Elements of the JSON lists and objects in *value*, at every level (0 for a scalar)."""
    if isinstance(value, dict):
        return len(value) + sum(_count_values(x) for x in value.values())
    if isinstance(value, list):
        return len(value) + sum(_count_values(x) for x in value)
    return 0


def check_entries(v: Violations, field: str, size: int, limit: int, what: str = "entries") -> bool:
    """*size* entries of a repeated field at most *limit*; False (and a violation) past it."""
    if size > limit:
        v.add(field, f"holds {size} {what}; the limit is {limit}")
        return False
    return True


def _has_bad_number(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_bad_number(x) for x in value.values())
    if isinstance(value, list):
        return any(_has_bad_number(x) for x in value)
    return False


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(x) for k, x in value.items())
    if isinstance(value, list):
        return any(_has_nul(x) for x in value)
    return False


def _visible(text: str) -> bool:
    """True if *text* has a character that is not whitespace, a format character
    (zero-width space, joiners, BOM) or a control character."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Cf", "Cc") for ch in text)


def _identity_paths(value: Any, prefix: str, depth: int = 0) -> list[str]:
    """Dotted paths of identity keys in *value* (objects inside objects and lists), up to a
    depth past any allowed one (deeper input is refused for its depth anyway)."""
    if depth > 64:
        return []
    found: list[str] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            path = f"{prefix}{key}"
            if str(key).lower() in IDENTITY_KEYS:
                found.append(path)
            found += _identity_paths(inner, f"{path}.", depth + 1)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += _identity_paths(inner, f"{prefix.removesuffix('.')}[{i}].", depth + 1)
    return found


def check_metadata(v: Violations, field: str, metadata: dict[str, Any], limits: LimitsSettings) -> None:
    """Size, depth, keys at every level, finite numbers, no NULs, and no identity keys at any depth."""
    bad = sorted(_identity_paths(metadata, ""))
    if bad:
        v.add(field, f"identity keys {bad} are not allowed in metadata; set them in scope")
        return
    encoded = json.dumps(metadata, separators=(",", ":"), ensure_ascii=False)
    keys = _count_keys(metadata)
    if len(encoded.encode()) > limits.max_metadata_bytes:
        v.add(field, f"is {len(encoded.encode())} bytes as JSON; the limit is {limits.max_metadata_bytes} bytes")
    elif _depth(metadata) > limits.max_metadata_depth:
        v.add(field, f"nests {_depth(metadata)} levels; the limit is {limits.max_metadata_depth}")
    elif keys > limits.max_metadata_keys:
        v.add(field, f"holds {keys} keys (at every level); the limit is {limits.max_metadata_keys}")
    elif _has_bad_number(metadata):
        v.add(field, "numbers must be finite")
    elif "\\u0000" in encoded or "\x00" in encoded:
        v.add(field, "must not contain NUL characters")


def check_new_memory(
    v: Violations,
    field: str,
    memory: NewMemory,
    limits: LimitsSettings,
    dimensions: int,
    *,
    now: datetime | None = None,
) -> None:
    """Every field of one memory to store; *now* is the `valid_from` it gets when unset."""
    check_scope(v, f"{field}.scope", memory.scope, limits)
    check_text(v, f"{field}.content", memory.content, limits.max_content_bytes, required=True)
    check_text(v, f"{field}.name", memory.name, limits.max_name_bytes)
    check_text(v, f"{field}.description", memory.description, limits.max_description_bytes)
    check_metadata(v, f"{field}.metadata", memory.metadata, limits)
    check_time(v, f"{field}.valid_from_time", memory.valid_from)
    check_time(v, f"{field}.valid_to_time", memory.valid_to)
    check_time(v, f"{field}.expire_time", memory.expires_at)
    if memory.valid_from and memory.valid_to and memory.valid_to <= memory.valid_from:
        v.add(f"{field}.valid_to_time", "must be after valid_from_time")
    elif not memory.valid_from and memory.valid_to and now and memory.valid_to <= now:
        v.add(f"{field}.valid_to_time", "must be after valid_from_time (now, when valid_from_time is unset)")
    check_text(v, f"{field}.provenance.session_id", memory.provenance.session_id, limits.max_id_bytes)
    if len(memory.provenance.message_ids) > limits.max_batch_size:
        v.add(
            f"{field}.provenance.message_ids",
            f"holds {len(memory.provenance.message_ids)} ids; the limit is {limits.max_batch_size}",
        )
    else:
        for i, mid in enumerate(memory.provenance.message_ids):
            check_text(v, f"{field}.provenance.message_ids[{i}]", mid, limits.max_id_bytes)
    if memory.embedding is not None:
        if len(memory.embedding) != dimensions:
            v.add(
                f"{field}.embedding",
                f"has {len(memory.embedding)} dimensions; the workspace's embeddings have {dimensions}",
            )
        # A finite sum means every value is finite (one NaN or infinity makes it NaN or
        # infinite); only then is each value looked at (the sum may also overflow).
        elif not math.isfinite(sum(memory.embedding)) and not all(math.isfinite(x) for x in memory.embedding):
            v.add(f"{field}.embedding", "values must be finite")
        elif not any(memory.embedding):
            v.add(f"{field}.embedding", "must not be the zero vector (cosine distance is undefined)")
        elif not MIN_EMBEDDING_NORM <= math.hypot(*memory.embedding) <= MAX_EMBEDDING_NORM:
            v.add(
                f"{field}.embedding",
                f"its length must be between {MIN_EMBEDDING_NORM:g} and {MAX_EMBEDDING_NORM:g} (pgvector's float32 "
                "cosine of it is otherwise NaN)",
            )


MIN_EMBEDDING_NORM = 1e-15
MAX_EMBEDDING_NORM = 1e15
"""The Euclidean length a client's embedding may have. pgvector sums the squares in float32
(its cosine: dot / sqrt(|a|^2 |b|^2)); a vector of 384 values of 1e-30 has |a|^2 = 0 there,
one of 1e30 has infinity, and its cosine is NaN against every query: stored, it turned the
vector score of every search of the workspace into NaN (WEIGHTED fused scores all NaN). Within
these bounds the squares and their sum stay normal float32 numbers at any dimension up to
pgvector's 16,000."""


def check_batch(v: Violations, field: str, size: int, limits: LimitsSettings) -> None:
    """A write's list *field* holds 1 to `limits.max_batch_size` entries. Over the limit the
    violation (on *field* itself) says "the limit is L": the mem0 facade learns L from
    those words (`memplane.compat.mem0.writes.Batches`), as from `api.writeback`'s check."""
    if size == 0:
        v.add(field, "must hold at least one entry")
    elif size > limits.max_batch_size:
        v.add(field, f"holds {size} entries; the limit is {limits.max_batch_size}")


def check_request_id(v: Violations, field: str, request_id: str, limits: LimitsSettings) -> None:
    check_text(v, field, request_id, limits.max_id_bytes)


def check_workspace_name(v: Violations, field: str, name: str) -> None:
    """A Kubernetes DNS label: 1-63 of a-z, 0-9, '-', starting with a letter."""
    if not WORKSPACE_NAME.match(name):
        shown = name if len(name) <= 64 else name[:64] + "..."
        v.add(
            field,
            f"{shown!r} is not a workspace name: 1-63 characters of a-z, 0-9 and '-', "
            "starting with a letter, not ending with '-'",
        )


def parse_memory_id(v: Violations, field: str, value: str) -> str:
    """Canonical form of a memory id (UUID); records a violation and returns "" if malformed."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        v.add(field, "must be a memory id (UUID)")
        return ""


def check_filter(v: Violations, field: str, flt: MemoryFilter, limits: LimitsSettings) -> None:
    """Scope ids, types, times and the metadata expression (depth, count, operands)."""
    check_scope(v, field, Scope(flt.user_id, flt.agent_id, flt.session_id), limits)
    check_entries(v, f"{field}.types", len(flt.types), limits.max_enum_entries)
    check_time(v, f"{field}.create_time_start", flt.created_after)
    check_time(v, f"{field}.create_time_end", flt.created_before)
    if flt.metadata is not None:
        count = [0]
        _check_expr(v, f"{field}.metadata", flt.metadata, limits, depth=1, count=count)
        if count[0] > limits.max_filter_conditions:
            v.add(f"{field}.metadata", f"holds {count[0]} conditions; the limit is {limits.max_filter_conditions}")


def _check_expr(
    v: Violations, field: str, expr: MetadataExpr, limits: LimitsSettings, *, depth: int, count: list[int]
) -> None:
    if depth > limits.max_metadata_depth:
        v.add(field, f"nests more than {limits.max_metadata_depth} levels")
        return
    if isinstance(expr, Condition):
        count[0] += 1
        _check_condition(v, f"{field}.condition", expr, limits)
    elif isinstance(expr, All | AnyOf):
        name = "all" if isinstance(expr, All) else "any"
        if not expr.operands or len(expr.operands) > 32:
            v.add(f"{field}.{name}.filters", "must hold 1 to 32 operands")
        for i, sub in enumerate(expr.operands):
            _check_expr(v, f"{field}.{name}.filters[{i}]", sub, limits, depth=depth + 1, count=count)
    elif isinstance(expr, Not):
        _check_expr(v, f"{field}.not", expr.operand, limits, depth=depth + 1, count=count)


def _check_condition(v: Violations, field: str, cond: Condition, limits: LimitsSettings) -> None:
    key = ".".join(cond.path)
    if not cond.path or any(not p for p in cond.path):
        v.add(f"{field}.key", "must be a non-empty key path (dots separate nested keys)")
    elif len(key.encode()) > 256 or len(cond.path) > limits.max_metadata_depth:
        v.add(f"{field}.key", f"must be at most 256 bytes and {limits.max_metadata_depth} levels")
    elif "\x00" in key:
        v.add(f"{field}.key", "must not contain NUL characters")
    if _has_nul(cond.value):
        v.add(f"{field}.value", "must not contain NUL characters")
    if cond.operator is Operator.IN and not isinstance(cond.value, list):
        v.add(f"{field}.value", "must be a list for IN")
    elif (values := _count_values(cond.value)) > limits.max_filter_values:
        v.add(f"{field}.value", f"holds {values} values (at every level); the limit is {limits.max_filter_values}")
    if cond.operator in (Operator.LT, Operator.LTE, Operator.GT, Operator.GTE) and (
        isinstance(cond.value, bool) or not isinstance(cond.value, int | float | str)
    ):
        v.add(f"{field}.value", "must be a number or a string for an ordering operator")
    if cond.operator not in (Operator.EXISTS,) and cond.value is None and cond.operator is not Operator.EQ:
        v.add(f"{field}.value", "is required for this operator")
