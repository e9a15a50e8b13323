"""Workspace quotas enforced outside the write transaction: calls per second (per server
process) and embedding tokens per UTC day. Memory-count and byte quotas are checked in
the write transaction itself (`memplane.server.storage.memories`)."""
