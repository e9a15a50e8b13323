"""Read-your-writes tokens: PostgreSQL WAL positions ("LSN", text "X/Y" in hex).

A write RPC's response carries the primary's WAL position after its commit in the
trailing metadata entry `memplane-lsn` (when the server reads from a replica,
`database.read_dsn`). A client sends the newest position it has seen in the request
metadata entry of the same name; a retrieval read then sees every write up to it
(`memplane.storage.replica.ReadRouter` says how).
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


def newest_lsn(current: str, seen: str) -> str:
    """The later of two positions ("" is before every position); *seen* is ignored if malformed."""
    try:
        later = parse_lsn(seen)
    except ValueError:
        return current
    if not current or later > parse_lsn(current):
        return seen
    return current
