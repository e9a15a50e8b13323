"""`memplane console`: a web page for people over a workspace's memories.

An ASGI app (Starlette under uvicorn) that serves a static page (``static/``: plain ES
modules, HTML and CSS, no build step) and a small JSON backend-for-frontend (``api``)
which calls the gRPC services with the signed-in person's key through the client SDK.
It holds no database connection (an import-linter contract in pyproject.toml says so).
`memplane.console.app.build_app` is the composition root.
"""
