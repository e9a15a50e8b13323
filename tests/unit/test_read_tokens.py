"""Read-your-writes tokens: sealed WAL positions (memplane.server.api.read_tokens) and the
client's choice of the newest (memplane.domain.consistency.newest_token)."""

from __future__ import annotations

import os

import pytest

from memplane.domain.consistency import newest_token
from memplane.errors import InvalidArgumentError
from memplane.server.api.read_tokens import ReadTokens


def test_a_sealed_position_opens_for_its_workspace_only() -> None:
    tokens = ReadTokens(os.urandom(32))
    token = tokens.seal(7, 42, "1A/2B3C")
    assert token.startswith("42.")
    assert "1A/2B3C" not in token
    assert tokens.open(7, token) == "1A/2B3C"
    assert tokens.seal(7, 42, "1A/2B3C") != token  # a fresh nonce each time: equal positions look unrelated
    for workspace_key, text in ((8, token), (7, "43." + token.partition(".")[2]), (7, token[:-2])):
        with pytest.raises(InvalidArgumentError, match="memplane-lsn"):
            tokens.open(workspace_key, text)
    with pytest.raises(InvalidArgumentError, match="memplane-lsn"):
        ReadTokens(os.urandom(32)).open(7, token)  # another installation's key
    for garbage in ("", "0/16B3A80", "x.abc", "1.!!!", "99999999999999999999.abc"):
        with pytest.raises(InvalidArgumentError, match="memplane-lsn"):
            tokens.open(7, garbage)
    with pytest.raises(ValueError, match="32 bytes"):
        ReadTokens(b"short")


def test_the_client_keeps_the_token_with_the_highest_counter() -> None:
    assert newest_token("", "3.aaa") == "3.aaa"
    assert newest_token("3.aaa", "2.bbb") == "3.aaa"  # an older write's reply arriving late
    assert newest_token("3.aaa", "5.ccc") == "5.ccc"
    assert newest_token("3.aaa", "3.ddd") == "3.ddd"  # a tie covers the same memories
    assert newest_token("3.aaa", "0/16B3A80") == "3.aaa"  # not a token: ignored
    assert newest_token("3.aaa", "x.eee") == "3.aaa"
