"""Workspace quotas enforced outside the write transaction: calls per second and calls in
flight (per server process), embedding tokens per UTC day, and each workspace's fair share
of the process's database connections and model calls (`fair`). Memory-count and byte
quotas are checked in the write transaction itself (`memplane.server.storage.memories`)."""
