"""Where a retrieval read runs: a streaming replica when one is configured and fresh
enough for the request, otherwise the primary. Writes never come here.

The rule, per read (`ReadRouter.read`):

- No replica configured (`database.read_dsn` unset): the primary.
- The replica failed within the last `retry_seconds` (unreachable, no free connection
  within its pool timeout, a broken connection): the primary, at once.
- With a read-your-writes token (*after_lsn*, a WAL position a write returned): the replica
  once it has replayed that position, checked on the very connection that runs the read
  and polled every 5 ms for at most `wait_seconds`; past that, the primary. Waiting a
  little keeps the load of read-after-write traffic on the replica (streaming lag on a
  LAN is milliseconds); falling back bounds the added latency by `wait_seconds` and never
  returns a stale answer.
- Without a token: the replica while its measured lag is at most `max_lag_seconds` and a
  WAL receiver runs; measured at most every `lag_check_seconds` (one small query). So an
  untokened read sees the primary's commits older than about `max_lag_seconds +
  lag_check_seconds`, as far as the standby can tell: WAL the primary has not sent is
  invisible to it until the receiver's stream breaks (`wal_receiver_timeout`, 60 s by
  default), after which the replica counts as stale.

A read that fails on the replica with `UnavailableError` is run again on the primary
(reads are idempotent); other errors (a bad request, a statement timeout) are the answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from memplane.errors import UnavailableError
from memplane.server.storage.database import Connection, Database, ReplicaBehindError

_log = logging.getLogger(__name__)

T = TypeVar("T")

Clock = Callable[[], float]


@dataclass(frozen=True)
class ReplicaPolicy:
    """The bounds of `ReadRouter` (seconds; see the module's docstring)."""

    wait_seconds: float = 0.1
    max_lag_seconds: float = 5.0
    lag_check_seconds: float = 1.0
    retry_seconds: float = 5.0


class ReadRouter:
    """Routes tenant reads between *primary* and an optional *replica* (both opened by the
    caller). `stats` counts reads by where they ran and why: keys "replica", "primary"
    (no replica configured), "primary:down", "primary:lagging", "primary:stale",
    "primary:failed" (the replica failed during this read)."""

    def __init__(
        self,
        primary: Database,
        replica: Database | None = None,
        policy: ReplicaPolicy | None = None,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self._primary = primary
        self._replica = replica
        self._policy = policy or ReplicaPolicy()
        self._clock = clock
        self._down_until = 0.0
        self._fresh_until = 0.0
        self._fresh = False
        self._probe_lock = asyncio.Lock()
        self.stats: Counter[str] = Counter()

    @property
    def replicated(self) -> bool:
        """True when reads may run on a replica (and writes should hand out tokens)."""
        return self._replica is not None

    async def close(self) -> None:
        """Close the replica's pool (the primary's belongs to the caller)."""
        if self._replica is not None:
            await self._replica.close()

    async def write_position(self, workspace_key: int) -> tuple[str, int] | None:
        """The primary's WAL position and *workspace_key*'s event counter after the
        caller's committed writes (`Database.write_position`: what a read-your-writes token
        seals); None without a replica (every read sees every write). Raises
        `UnavailableError` if the primary cannot be reached."""
        if self._replica is None:
            return None
        return await self._primary.write_position(workspace_key)

    @property
    def has_replica(self) -> bool:
        """Whether reads may run on a replica (`database.read_dsn` set)."""
        return self._replica is not None

    async def read(
        self,
        workspace_key: int,
        run: Callable[[Connection], Awaitable[T]],
        *,
        after_lsn: str = "",
        pipeline_settings: Mapping[str, str] | None = None,
    ) -> T:
        """`await run(conn)` in a tenant transaction of *workspace_key* (a pipelined one,
        with those settings, when *pipeline_settings* is not None) on the replica or the
        primary, by the module's rule; its value once the transaction has ended. *run*
        may be called twice (replica failed, then primary): it must only read.
        Raises what the primary's read raises."""
        replica = self._replica
        on_primary = _Read(self._primary, workspace_key, pipeline_settings)
        if replica is None:
            self.stats["primary"] += 1
            return await on_primary.run(run)
        if self._clock() < self._down_until:
            self.stats["primary:down"] += 1
            return await on_primary.run(run)
        try:
            if not after_lsn and not await self._replica_fresh(replica):
                self.stats["primary:stale"] += 1
                return await on_primary.run(run)
            value = await _Read(replica, workspace_key, pipeline_settings).run(
                run, after_lsn=after_lsn, wait_seconds=self._policy.wait_seconds
            )
        except ReplicaBehindError:
            self.stats["primary:lagging"] += 1
            _log.debug("replica behind %s after %.3f s: reading from the primary", after_lsn, self._policy.wait_seconds)
        except UnavailableError as error:
            self._down_until = self._clock() + self._policy.retry_seconds
            self.stats["primary:failed"] += 1
            _log.warning("replica failed (%s): reads go to the primary for %.1f s", error, self._policy.retry_seconds)
        else:
            self.stats["replica"] += 1
            return value
        return await on_primary.run(run)

    async def _replica_fresh(self, replica: Database) -> bool:
        """Whether the replica streams and lags at most `max_lag_seconds` (cached for
        `lag_check_seconds`). Raises `UnavailableError` if it cannot be asked."""
        if self._clock() < self._fresh_until:
            return self._fresh
        async with self._probe_lock:
            if self._clock() >= self._fresh_until:
                streaming, lag = await replica.replica_state()
                self._fresh = streaming and lag <= self._policy.max_lag_seconds
                self._fresh_until = self._clock() + self._policy.lag_check_seconds
                if not self._fresh:
                    _log.info(
                        "replica stale (streaming=%s, lag %.1f s): reads without a token use the primary",
                        streaming,
                        lag,
                    )
            return self._fresh


@dataclass(frozen=True)
class _Read:
    """One tenant transaction of *workspace_key* on *db*: pipelined with *settings* when
    they are not None."""

    db: Database
    workspace_key: int
    settings: Mapping[str, str] | None

    async def run(
        self, body: Callable[[Connection], Awaitable[T]], *, after_lsn: str = "", wait_seconds: float = 0.0
    ) -> T:
        """`await body(conn)` in the transaction, after waiting for *after_lsn* (see `Database.tenant`)."""
        if self.settings is None:
            async with self.db.tenant(self.workspace_key, after_lsn=after_lsn, wait_seconds=wait_seconds) as conn:
                return await body(conn)
        async with self.db.tenant_pipeline(
            self.workspace_key, self.settings, after_lsn=after_lsn, wait_seconds=wait_seconds
        ) as conn:
            return await body(conn)
