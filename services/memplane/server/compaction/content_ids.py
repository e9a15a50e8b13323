"""Content ids: stable ids for messages sent without one, so a retried span maps to the
same transcript rows."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence

from memplane.domain.context import ContextMessage
from memplane.domain.context_json import blocks_to_json

CONTENT_ID_PREFIX = "~"


def with_content_ids(messages: Sequence[ContextMessage]) -> list[ContextMessage]:
    """*messages* with every empty id replaced by a content id: "~" + 16 hex digits of the
    SHA-256 of the whole span (every message's role, name, time, blocks and id) and the
    message's position in it. Sending the same span again (a retry, a lost reply) maps
    to the same transcript rows; another span never merges with it, so equal words said
    twice stay two messages. Messages that should match across different spans need
    client ids. Costs one JSON encoding and hash of the span, skipped when every message
    has an id (the list is then *messages* as given)."""
    if all(m.id for m in messages):
        return list(messages)
    span = hashlib.sha256()
    for m in messages:
        body = [m.id, m.role.value, m.name, m.created_at.isoformat() if m.created_at else "", blocks_to_json(m.blocks)]
        span.update(json.dumps(body, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        span.update(b"\x1e")
    prefix = span.hexdigest()
    out: list[ContextMessage] = []
    for i, m in enumerate(messages):
        if m.id:
            out.append(m)
            continue
        digest = hashlib.sha256(f"{prefix}:{i}".encode()).hexdigest()[:16]
        out.append(dataclasses.replace(m, id=CONTENT_ID_PREFIX + digest))
    return out
