"""The memplane server: the gRPC edge (api/), the app that wires it (app), the four services
(retrieval/, writeback/, compaction/, admin/), storage/ (PostgreSQL + pgvector; all SQL),
embedding/, llm/, quota/ and the settings. Installed by `pip install memplane[server]`;
none of it is public API: clients use memplane.client (see memplane's docstring).
"""
