"""Work that must wait until a write has committed (`after_commit`).

While a `Database.tenant()` or `Database.autocommit()` block runs, callbacks registered by
the code inside it are collected for the running task (a context variable); the block runs
them once its transaction has committed, and drops them when it ends with an error (the
transaction rolled back: there is nothing to tell). Outside such a block a callback runs at
once. The vector indexer's `mark` is one: told before the commit, a pass could look for
rows not visible yet and miss them until its next scan.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

Callback = Callable[[], None]

_PENDING: ContextVar[list[Callback] | None] = ContextVar("memplane_after_commit", default=None)


def after_commit(callback: Callback) -> None:
    """Run *callback* when the enclosing tenant or autocommit block has committed (at once
    outside one); never when it rolls back."""
    pending = _PENDING.get()
    if pending is None:
        callback()
    else:
        pending.append(callback)


@contextlib.contextmanager
def collected() -> Iterator[list[Callback]]:
    """Collect `after_commit` callbacks of this task until the block ends: the caller runs
    them (`run`) once its transaction has committed."""
    pending: list[Callback] = []
    token = _PENDING.set(pending)
    try:
        yield pending
    finally:
        _PENDING.reset(token)


def run(pending: list[Callback]) -> None:
    """Run the collected callbacks, in the order they were registered."""
    for callback in pending:
        callback()
