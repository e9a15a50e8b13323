"""Checks of a workspace's quotas, retention and labels (CreateWorkspace, UpdateWorkspace),
and the update-mask paths UpdateWorkspace accepts."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from memplane.domain.context import TOKEN_ENCODINGS
from memplane.domain.models import Quotas, Retention
from memplane.server.validation import Violations, check_text

MAX_LABELS = 32
MAX_LABEL_VALUE_BYTES = 256
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}\Z")
MAX_RATE = 1_000_000  # calls per second; an int32 with room to spare
# Longest lifetime, 100 years: a bound keeps expiry arithmetic far from datetime's limits.
MAX_TTL_SECONDS = 100 * 365 * 24 * 3600

QUOTA_FIELDS = (
    "max_memories",
    "max_bytes",
    "max_requests_per_second",
    "max_embedding_tokens_per_day",
    "scheduling_weight",
)
MAX_SCHEDULING_WEIGHT = 1_000  # the column's CHECK (migration 0018)
# What UpdateWorkspace's update_mask may name (AIP-161 paths of Workspace).
UPDATE_PATHS = frozenset({"quotas", "retention", "labels", "token_encoding", *(f"quotas.{f}" for f in QUOTA_FIELDS)})


def check_quotas(v: Violations, field: str, quotas: Quotas) -> None:
    """Every quota is 0 (unlimited) or positive; the rate at most MAX_RATE."""
    for name in QUOTA_FIELDS:
        if getattr(quotas, name) < 0:
            v.add(f"{field}.{name}", "must not be negative (0 means unlimited)")
    if quotas.max_requests_per_second > MAX_RATE:
        v.add(f"{field}.max_requests_per_second", f"must be at most {MAX_RATE}")
    if quotas.scheduling_weight > MAX_SCHEDULING_WEIGHT:
        v.add(f"{field}.scheduling_weight", f"must be at most {MAX_SCHEDULING_WEIGHT}")


def check_retention(v: Violations, field: str, retention: Retention) -> None:
    """Lifetimes in 0..MAX_TTL_SECONDS (0: forever) for the default, 1..MAX for a rule."""
    if not 0 <= retention.default_ttl_seconds <= MAX_TTL_SECONDS:
        v.add(f"{field}.default_ttl", f"must be between 0 and {MAX_TTL_SECONDS} seconds (100 years)")
    for memory_type, ttl in retention.type_ttl_seconds.items():
        if not 1 <= ttl <= MAX_TTL_SECONDS:
            v.add(f"{field}.rules[{memory_type.value}].ttl", f"must be between 1 and {MAX_TTL_SECONDS} seconds")


def check_labels(v: Violations, field: str, labels: Mapping[str, str]) -> None:
    """At most MAX_LABELS; keys 1-128 of A-Z a-z 0-9 . _ / - (starting alphanumeric)."""
    if len(labels) > MAX_LABELS:
        v.add(field, f"holds {len(labels)} labels; the limit is {MAX_LABELS}")
    for key, value in sorted(labels.items()):  # proto maps have no order; violations do
        if not LABEL_KEY.match(key):
            v.add(f"{field}[{key[:64]!r}]", "keys are 1-128 of A-Z, a-z, 0-9, '.', '_', '/', '-'")
        check_text(v, f"{field}[{key[:64]!r}]", value, MAX_LABEL_VALUE_BYTES)


def check_token_encoding(v: Violations, field: str, token_encoding: str) -> None:
    """Empty (the default) or one of TOKEN_ENCODINGS."""
    if token_encoding and token_encoding not in TOKEN_ENCODINGS:
        v.add(field, f"must be one of {', '.join(TOKEN_ENCODINGS)}")


def check_update_mask(v: Violations, field: str, paths: Sequence[str]) -> None:
    """A non-empty mask of UPDATE_PATHS."""
    if not paths:
        v.add(field, f"must name at least one field of {sorted(UPDATE_PATHS)}")
    for path in paths:
        if path not in UPDATE_PATHS:
            v.add(field, f"cannot update {path!r}; updatable: {sorted(UPDATE_PATHS)}")
