"""The SDK's retries: gRPC's own retry policy in the channel's service config (gRFC A6,
"gRPC Retry Design"), not a hand-written loop.

Retried: the idempotent calls — every read (RetrievalService — SelectMemoryFiles too: it
writes nothing, though a retry may ask its LLM again — health Check,
ListMemoryEvents, CheckContext, ReadToolResult, GetTranscript, the admin Get/List RPCs)
and every write that carries an idempotency key: the SDK gives each WriteBackService
write and SummarizeSession a fresh `request_id` unless the caller passes one, so a
repeat is stored once (the server replays the first reply). Not retried: CompactMessages,
CompactToolResults and PrepareContext (no request id; a retry may call the model again),
and the admin writes.

On what: UNAVAILABLE (a server restarting, a connection dropped, a database connection
found broken) and DEADLINE_EXCEEDED *answered by the server* (a statement timeout) while
the call's own deadline still has time. At most MAX_ATTEMPTS attempts in all; gRPC waits
a random time up to the current backoff before each retry (full jitter), the backoff
starting at 50 ms and doubling up to 1 s. The call's deadline bounds all its attempts
(A6: a call that has run out of time is over, never retried past its deadline).

Where the channel does not reach, and what the SDK adds: an attempt that hangs until the
call's deadline. `attempt_timeout` on the client sets A6's `perAttemptRecvTimeout`
(honoured by grpcio's core): an attempt with no reply within it is cancelled and retried
like a retryable failure, inside the call's deadline. Off by default, since a long
AddMemories batch or a summary by a model may take longer than any fixed attempt time.

The budget against a retry storm is `retryThrottling`: each failed attempt of a channel
costs a token, each success gives back TOKEN_RATIO, and no call is retried while fewer
than half of MAX_TOKENS are left — when most calls fail (a real outage) the channel
sends each call once, not MAX_ATTEMPTS times.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

MAX_ATTEMPTS = 5
MAX_TOKENS = 10
TOKEN_RATIO = 0.1
RETRYABLE_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")

# The idempotent methods (the whole of RetrievalService and WriteBackService: its writes
# always carry a request_id from the SDK, its one read is a read).
IDEMPOTENT_METHODS: tuple[dict[str, str], ...] = (
    {"service": "memplane.v1.RetrievalService"},
    {"service": "memplane.v1.WriteBackService"},
    {"service": "memplane.v1.CompactionService", "method": "CheckContext"},
    {"service": "memplane.v1.CompactionService", "method": "ReadToolResult"},
    {"service": "memplane.v1.CompactionService", "method": "GetTranscript"},
    {"service": "memplane.v1.CompactionService", "method": "SummarizeSession"},
    {"service": "memplane.v1.AdminService", "method": "GetWorkspace"},
    {"service": "memplane.v1.AdminService", "method": "ListWorkspaces"},
    {"service": "memplane.v1.AdminService", "method": "ListApiKeys"},
    {"service": "memplane.v1.AdminService", "method": "GetWorkspaceUsage"},
    {"service": "grpc.health.v1.Health", "method": "Check"},
)


def new_request_id() -> str:
    """A fresh idempotency key for one write ("sdk-" and 32 hex digits, a UUID4)."""
    return f"sdk-{uuid.uuid4().hex}"


def service_config(attempt_timeout: float | None = None) -> str:
    """The channel option "grpc.service_config" of every channel the SDK opens (JSON).
    *attempt_timeout*: seconds an attempt may wait for its reply before it is retried
    (A6 `perAttemptRecvTimeout`); None: an attempt may use the call's whole deadline.
    Raises `ValueError` for a non-positive *attempt_timeout*."""
    policy: dict[str, Any] = {
        "maxAttempts": MAX_ATTEMPTS,
        "initialBackoff": "0.05s",
        "maxBackoff": "1s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": list(RETRYABLE_CODES),
    }
    if attempt_timeout is not None:
        if attempt_timeout <= 0:
            raise ValueError(f"attempt_timeout must be positive, got {attempt_timeout}")
        policy["perAttemptRecvTimeout"] = f"{attempt_timeout:.3f}s"
    return json.dumps(
        {
            "methodConfig": [{"name": list(IDEMPOTENT_METHODS), "retryPolicy": policy}],
            "retryThrottling": {"maxTokens": MAX_TOKENS, "tokenRatio": TOKEN_RATIO},
        }
    )


SERVICE_CONFIG = service_config()
"""The service config without per-attempt timeouts."""
