"""The SDK's retries: gRPC's own retry policy in the channel's service config (gRFC A6),
not a hand-written loop.

Retried: every RetrievalService RPC (SearchMemories, GetMemory, ListMemories — reads,
safe to repeat) and health Check, on UNAVAILABLE only (a server restarting, a database
connection found broken), at most MAX_ATTEMPTS attempts in all with exponential backoff
(gRPC draws each wait at random up to the current backoff), inside the call's deadline.
`retryThrottling` stops retrying when most calls of a channel fail (a real outage):
each failure costs a token, each success gives back TOKEN_RATIO, and retries stop below
half of MAX_TOKENS.

Not retried by the channel: writes. gRPC cannot tell a write with a `request_id` (safe
to repeat: stored once) from one without (repeating it stores it twice), so a caller
retries its own writes, with the same request_id.
"""

from __future__ import annotations

import json

MAX_ATTEMPTS = 5
MAX_TOKENS = 10
TOKEN_RATIO = 0.1

SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [
                    {"service": "memplane.v1.RetrievalService"},
                    {"service": "grpc.health.v1.Health", "method": "Check"},
                ],
                "retryPolicy": {
                    "maxAttempts": MAX_ATTEMPTS,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "1s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ],
        "retryThrottling": {"maxTokens": MAX_TOKENS, "tokenRatio": TOKEN_RATIO},
    }
)
"""The channel option "grpc.service_config" of every channel the SDK opens."""
