"""Read-your-writes: PostgreSQL WAL positions ("LSN", text "X/Y" in hex) and the tokens
that carry them sealed.

A write RPC's response carries a token in the trailing metadata entry `memplane-lsn`
(when the server reads from a replica, `database.read_dsn`): the primary's WAL position
after its commit, encrypted, behind the workspace's own event counter
(`memplane.server.api.read_tokens`). A client sends the newest token it has seen in the request
metadata entry of the same name; a retrieval read then sees every write up to it
(`memplane.server.storage.replica.ReadRouter` says how).
"""

from __future__ import annotations

import re

LSN_METADATA_KEY = "memplane-lsn"

_LSN = re.compile(r"[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}")


def parse_lsn(text: str) -> int:
    """The 64-bit WAL position of "X/Y" (two hex numbers of at most 32 bits).
    Raises `ValueError` for anything else."""
    if not _LSN.fullmatch(text):
        raise ValueError(f"not a WAL position 'X/Y' (hex): {text[:40]!r}")
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


def newest_token(current: str, seen: str) -> str:
    """The later of two read-your-writes tokens ("<counter>.<sealed position>", see
    `memplane.server.api.read_tokens`; "" is before every token): the one with the higher counter,
    *seen* on a tie (both cover the same memories). A *seen* that is not a token is
    ignored."""
    counter, dot, _ = seen.partition(".")
    if not dot or not counter.isdigit():
        return current
    if not current or int(counter) >= int(current.partition(".")[0] or 0):
        return seen
    return current
