"""The exceptions the mem0 facade raises where mem0 raises its own (mem0 2.2.1: a
`ValueError` for a missing memory or a bad argument in `memplane.compat.mem0.Memory`'s
counterpart, `mem0.Memory`). Each chains the memplane error it comes from (`__cause__`).
Other memplane errors (UnavailableError, UnauthenticatedError, ...) pass through as they are."""

from __future__ import annotations


class ValidationError(ValueError):
    """A bad argument: no user_id / agent_id / run_id where one is required, an empty
    query, a filter operator memplane has no counterpart for, a field the server refused."""


class MemoryNotFoundError(ValueError):
    """No memory with that id in the key's workspace (mem0: "Memory with id ... not found")."""
