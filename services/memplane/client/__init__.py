"""The client SDK: `AsyncMemplaneClient` (grpc.aio) and the thin `MemplaneClient` sync
wrapper. gRPC statuses come back as the typed exceptions of `memplane.errors`."""

from memplane.client.aio import AsyncMemplaneClient
from memplane.client.sync import MemplaneClient
from memplane.domain.apikeys import generate_api_key

__all__ = ["AsyncMemplaneClient", "MemplaneClient", "generate_api_key"]
