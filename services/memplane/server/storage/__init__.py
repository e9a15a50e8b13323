"""PostgreSQL + pgvector storage: the only package that imports psycopg and pgvector.

Every query names the workspace (partition key) explicitly, and row-level security on
the tenant role checks it again (`Database.tenant`).
"""
