"""Signed-in sessions, held in the console process's memory.

A session id is 256 random bits (the HttpOnly cookie's value); it maps to the API key,
the key's id, a CSRF token and the session's own `AsyncMemplaneClient`. Nothing of the
key reaches the browser. A session ends at sign-out, after `idle_seconds` without a
request, or when the store is full and it is the least recently used.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from memplane.client import AsyncMemplaneClient
from memplane.domain.apikeys import split_key

Clock = Callable[[], float]
ClientFactory = Callable[[str], AsyncMemplaneClient]


@dataclass
class Session:
    """One signed-in person: the key's id (public), the CSRF token, the client, and
    whether the key is the admin key (workspaces and keys) or a workspace's (memories)."""

    session_id: str
    key_id: str
    csrf_token: str
    client: AsyncMemplaneClient
    last_used: float = field(default=0.0)
    admin: bool = False


def key_id_of(api_key: str) -> str:
    """The public key id of ``mp_<key_id>_<secret>``; "" for a key of another shape."""
    parts = split_key(api_key)
    return parts[0] if parts else ""


class SessionStore:
    """Sessions by id. *idle_seconds* (default 8 h) ends an unused session;
    *max_sessions* bounds memory (the least recently used goes first); *clock* is
    `time.monotonic` unless a test gives its own."""

    def __init__(
        self,
        client_factory: ClientFactory,
        *,
        idle_seconds: float = 8 * 3600.0,
        max_sessions: int = 1_000,
        clock: Clock = time.monotonic,
    ) -> None:
        self._factory = client_factory
        self._idle = idle_seconds
        self._max = max_sessions
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    async def open(self, api_key: str, client: AsyncMemplaneClient, *, admin: bool = False) -> Session:
        """A new session for *api_key* whose *client* has been checked against the
        server (*admin*: it is the admin key); the oldest session is closed when the
        store is full."""
        await self._expire()
        while len(self._sessions) >= self._max:
            _, oldest = self._sessions.popitem(last=False)
            await oldest.client.close()
        session = Session(
            session_id=secrets.token_urlsafe(32),
            key_id=key_id_of(api_key),
            csrf_token=secrets.token_urlsafe(32),
            client=client,
            last_used=self._clock(),
            admin=admin,
        )
        self._sessions[session.session_id] = session
        return session

    def client_for(self, api_key: str) -> AsyncMemplaneClient:
        """A new client holding *api_key* (not yet a session's)."""
        return self._factory(api_key)

    async def get(self, session_id: str | None) -> Session | None:
        """The live session *session_id* names (its idle time restarts), else None."""
        await self._expire()
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        session.last_used = self._clock()
        self._sessions.move_to_end(session_id)
        return session

    async def close(self, session_id: str) -> None:
        """End a session (sign-out); unknown ids are ignored."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await session.client.close()

    async def close_all(self) -> None:
        """End every session (the console's shutdown)."""
        while self._sessions:
            _, session = self._sessions.popitem()
            await session.client.close()

    async def _expire(self) -> None:
        now = self._clock()
        while self._sessions:
            sid, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used < self._idle:
                return
            del self._sessions[sid]
            await oldest.client.close()


def tokens_match(given: str | None, expected: str) -> bool:
    """Whether a request's CSRF token is the session's (constant time)."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())
