"""Credential changes heard from PostgreSQL, so every server process drops what it cached.

Migration 0008 makes PostgreSQL announce, on channel `CHANNEL` and only when the change
commits, every key revoked, re-secreted or deleted (`{"key_id": ...}`) and every
workspace updated or deleted (`{"workspace": name}`). One `InvalidationListener` per
process holds a dedicated connection that LISTENs and hands each notification to its
`CredentialCache` (the `Authenticator`): a revoke in one process applies in all of them
within the notification's delivery time (milliseconds on a LAN).

Notifications sent while no connection listens are lost (PostgreSQL queues them only for
listening sessions). So whenever the listener is not known to listen — before its first
LISTEN, after a connection loss, until it listens again — the cache is paused: emptied,
and nothing is served from it or put in it; every RPC verifies its key in the database.
The listener reconnects with exponential backoff (RECONNECT_FIRST_SECONDS doubling to
RECONNECT_MAX_SECONDS) and resumes the cache once LISTEN is in place. A connection lost
without a word from the network (no FIN, no RST) is found by a `SELECT 1` every
HEARTBEAT_SECONDS without a notification; until then the cache's own time-to-live
(`auth.key_cache_seconds`) bounds how long a stale entry can serve.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Protocol

import psycopg
from psycopg import sql

from memplane.server.background import cancel

_log = logging.getLogger(__name__)

CHANNEL = "memplane_credentials"
RECONNECT_FIRST_SECONDS = 0.05
RECONNECT_MAX_SECONDS = 2.0
HEARTBEAT_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 2  # libpq's connect_timeout: whole seconds


def application_name(pid: int) -> str:
    """The `application_name` of process *pid*'s listener connection (pg_stat_activity)."""
    return f"memplane-invalidation-{pid}"


class CredentialCache(Protocol):
    """What the listener drives: a cache of verified credentials."""

    def forget_key(self, key_id: str) -> None:
        """Drop every entry of key *key_id*."""

    def forget_workspace(self, name: str) -> None:
        """Drop every entry of a key of workspace *name*."""

    def pause_cache(self) -> None:
        """Drop every entry and cache nothing until `resume_cache`."""

    def resume_cache(self) -> None:
        """Drop every entry and cache again."""


class InvalidationListener:
    """LISTENs on `CHANNEL` over a connection of its own to *dsn* and applies each
    notification to *cache*. `start()` (needs a running event loop) pauses the cache and
    starts the background task; `await stop()` ends it. Both are idempotent. Never raises
    from the task: connection errors are logged and retried."""

    def __init__(self, dsn: str, cache: CredentialCache, *, heartbeat_seconds: float = HEARTBEAT_SECONDS) -> None:
        self._dsn = dsn
        self._cache = cache
        self._heartbeat = heartbeat_seconds
        self._task: asyncio.Task[None] | None = None
        self._listened = False  # whether the current connection got as far as LISTEN

    def start(self) -> None:
        """Pause the cache and start listening in the background (no-op when running)."""
        if self._task is not None and not self._task.done():
            return
        self._cache.pause_cache()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="memplane-invalidation")

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        await cancel(task)

    async def _run(self) -> None:
        delay = RECONNECT_FIRST_SECONDS
        quiet = False
        while True:
            self._listened = False
            try:
                await self._listen()
            except psycopg.Error as error:
                if self._listened:  # it had been listening: a fresh loss, reconnect quickly
                    delay, quiet = RECONNECT_FIRST_SECONDS, False
                # The first failure since the last LISTEN is news; each retry while the database is down is not.
                level = logging.DEBUG if quiet else logging.WARNING
                _log.log(
                    level, "credential invalidation listener not listening (%s); key cache paused", type(error).__name__
                )
                quiet = True
            except Exception:  # a bug must not end invalidation: the cache stays paused, and we retry
                _log.exception("credential invalidation listener failed; cache paused, restarting")
            finally:
                self._cache.pause_cache()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)

    async def _listen(self) -> None:
        """Connect, LISTEN, resume the cache, then apply notifications until the connection
        fails (`psycopg.Error`) or the task is cancelled."""
        async with await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            application_name=application_name(os.getpid()),
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
        ) as conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
            self._cache.resume_cache()  # whatever was cached before this moment may have missed a notification
            self._listened = True
            _log.debug("listening for credential changes on %s", CHANNEL)
            while True:
                async for notify in conn.notifies(timeout=self._heartbeat):
                    self._apply(notify.payload)
                await conn.execute("SELECT 1")  # a connection lost silently fails here

    def _apply(self, payload: str) -> None:
        _log.debug("credential change announced (%d bytes)", len(payload))
        try:
            change = json.loads(payload)
        except ValueError:
            change = None
        if isinstance(change, dict) and isinstance(change.get("key_id"), str):
            self._cache.forget_key(change["key_id"])
        elif isinstance(change, dict) and isinstance(change.get("workspace"), str):
            self._cache.forget_workspace(change["workspace"])
        else:  # not ours to read: forget everything rather than keep what it may have meant
            _log.warning("unreadable credential notification (%d bytes); cache cleared", len(payload))
            self._cache.resume_cache()
