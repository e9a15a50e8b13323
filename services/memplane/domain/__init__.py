"""Plain data types of memplane: memories, scopes, filters, events, workspaces.

No I/O and no third-party imports: storage, services and the gRPC edge all speak these.
"""
