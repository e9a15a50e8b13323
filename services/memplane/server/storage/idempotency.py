"""Idempotency records: a retried write returns the first reply and stores nothing new.

The record is inserted in the write's own transaction. A concurrent duplicate blocks on
the primary key until the first commits, then finds the record (or, if the first rolled
back, does the work itself) — so a request is applied at most once. A record is kept
`retention.idempotency_seconds` (24 h by default), then deleted by a sweep
(`delete_expired_records`, every `retention.sweep_interval_seconds`): a retry after
that is a new request and is stored again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from memplane.server.storage.database import Connection, Database, fetch_one


def request_hash(method: str, body: Any) -> bytes:
    """Stable SHA-256 of a request body (JSON-able) for detecting a reused key."""
    return hashlib.sha256(json.dumps([method, body], sort_keys=True, default=str).encode()).digest()


def request_hash_with_vectors(method: str, body: Any, vectors: Sequence[Sequence[float] | None]) -> bytes:
    """SHA-256 of a request body (JSON-able, without its vectors) and of *vectors* as
    little-endian float32 bytes, each after its length (None: absent). The vectors as
    JSON numbers cost a quarter of a one-memory AddMemories (0.3-0.5 ms for 384
    dimensions); their bytes are hashed in microseconds, and a float32 from the wire is
    the same float32 either way. Its own scheme (`method + "#vectors"`), so it never equals
    `request_hash` of anything."""
    digest = hashlib.sha256(json.dumps([method + "#vectors", body], sort_keys=True, default=str).encode())
    for vector in vectors:
        if vector is None:
            digest.update(b"\xff\xff\xff\xff")
        else:
            data = np.asarray(vector, dtype="<f4").tobytes()
            digest.update(len(data).to_bytes(4, "little") + data)
    return digest.digest()


@dataclass(frozen=True)
class Claim:
    """Result of claiming a request id: `replay` holds the first reply if it was done."""

    replay: Any | None
    same_request: bool


class IdempotencyStore:
    """Claim a request id inside a tenant transaction, and record its result."""

    async def claim(
        self,
        conn: Connection,
        workspace_key: int,
        request_id: str,
        method: str,
        digest: bytes,
        *,
        earlier: Callable[[], bytes] | None = None,
    ) -> Claim:
        """Insert a placeholder for *request_id*; if one exists, return its stored result.

        `same_request` is False when the id was used for another method or body: a stored
        digest that is neither *digest* nor *earlier()* (the body's digest by the scheme
        an earlier version stored, computed only then: a retry across an upgrade).
        """
        cur = await conn.execute(
            "INSERT INTO idempotency_keys (workspace_key, request_id, method, request_hash, result)"
            " VALUES (%s, %s, %s, %s, 'null'::jsonb) ON CONFLICT DO NOTHING RETURNING request_id",
            (workspace_key, request_id, method, digest),
        )
        if await cur.fetchone() is not None:
            return Claim(replay=None, same_request=True)
        cur = await conn.execute(
            "SELECT method, request_hash, result FROM idempotency_keys WHERE workspace_key = %s AND request_id = %s",
            (workspace_key, request_id),
        )
        row = await fetch_one(cur)
        return Claim(replay=row["result"], same_request=_same(row, method, digest, earlier))

    async def lookup(
        self,
        conn: Connection,
        workspace_key: int,
        request_id: str,
        method: str,
        digest: bytes,
        *,
        earlier: Callable[[], bytes] | None = None,
    ) -> Claim | None:
        """The completed record of *request_id* without claiming it (None if there is none
        or it is still in flight): lets a retry skip expensive work such as embedding.
        *earlier* as in `claim`."""
        cur = await conn.execute(
            "SELECT method, request_hash, result FROM idempotency_keys"
            " WHERE workspace_key = %s AND request_id = %s AND result <> 'null'::jsonb",
            (workspace_key, request_id),
        )
        row = await cur.fetchone()
        if row is None:
            return None
        return Claim(replay=row["result"], same_request=_same(row, method, digest, earlier))

    async def complete(self, conn: Connection, workspace_key: int, request_id: str, result: Any) -> None:
        """Store the reply of a claimed request id."""
        await conn.execute(
            "UPDATE idempotency_keys SET result = %s WHERE workspace_key = %s AND request_id = %s",
            (Jsonb(result), workspace_key, request_id),
        )


def _same(row: dict[str, Any], method: str, digest: bytes, earlier: Callable[[], bytes] | None) -> bool:
    stored = bytes(row["request_hash"])
    return row["method"] == method and (stored == digest or (earlier is not None and stored == earlier()))


_EXPIRE = (
    "DELETE FROM idempotency_keys WHERE ctid IN (SELECT ctid FROM idempotency_keys WHERE created_at < %(before)s"
    " ORDER BY created_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED)"
)


async def delete_expired_records(db: Database, *, before: datetime, batch_size: int = 1000) -> int:
    """Delete the idempotency records created before *before*, *batch_size* per admin
    transaction (rows a concurrent sweep or write holds are skipped); return how many.
    A retry of such a request id is then a new request (stored again). Raises
    `ValueError` for a batch size < 1."""
    return await db.delete_in_batches(_EXPIRE, {"before": before}, batch_size=batch_size)
