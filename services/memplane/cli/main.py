"""`memplane` — serve, migrate, manage workspaces and keys, add, search, select, export, import, eval, compact.

Settings come from the environment (MEMPLANE_*, see memplane.server.settings) and are loaded
once here. Exit status: 0 on success, 1 on a memplane error (message on stderr),
2 on bad usage: a bad argument, or a path that cannot be read or written (one line on
stderr, `memplane.cli.usage`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC

from google.protobuf import timestamp_pb2

from memplane.cli.connect import add_connection_flags, admin_client, workspace_client
from memplane.cli.usage import Parser
from memplane.errors import MemplaneError, UnavailableError
from memplane.server.logs import setup_logging
from memplane.server.settings import Settings
from memplane.v1 import admin_pb2, filter_pb2, memory_pb2

_log = logging.getLogger("memplane")


def _setup_logging(settings: Settings) -> None:
    setup_logging(settings.log_level, json_lines=settings.log_json)


async def cmd_serve(ns: argparse.Namespace, settings: Settings) -> int:
    """Run the server until SIGINT/SIGTERM, then shut down gracefully."""
    from memplane.server.api.interceptors import server_interceptors
    from memplane.server.api.server import freeze_startup_heap
    from memplane.server.api.tls import TlsFiles
    from memplane.server.app import build_app
    from memplane.server.serving import serve, stop_serving
    from memplane.server.telemetry import setup_telemetry

    workers = settings.grpc.workers if ns.workers is None else ns.workers
    if workers > 1:
        from memplane.cli.workers import supervise

        grpc_settings = settings.grpc
        return await supervise(
            workers,
            host=ns.host or grpc_settings.host,
            port=grpc_settings.port if ns.port is None else ns.port,
            services=ns.services,
            migrate=settings.database.migrate_on_start and not ns.no_migrate,
            # a worker's own bound (`memplane.server.serving.stop_serving`), and a margin to exit
            stop_seconds=grpc_settings.drain_seconds + grpc_settings.grace_period + grpc_settings.close_seconds + 5,
        )
    if ns.no_migrate:
        settings = settings.model_copy(
            update={"database": settings.database.model_copy(update={"migrate_on_start": False})}
        )
    # The loop's default executor (asyncio.to_thread: the embedding model, pg_ctl), ours to
    # end within the stop's bound (`memplane.server.serving.stop_serving`).
    threads = ThreadPoolExecutor(thread_name_prefix="memplane-worker")
    asyncio.get_running_loop().set_default_executor(threads)
    interceptors = server_interceptors() if setup_telemetry() else []
    tls = TlsFiles.from_settings(settings.grpc)
    app = await build_app(settings, services=ns.services.split(","))  # only what this process serves
    app.start()  # its background jobs
    try:
        running = await serve(
            app,
            host=ns.host or settings.grpc.host,
            port=settings.grpc.port if ns.port is None else ns.port,
            interceptors=interceptors,
            tls=tls,
        )
    except BaseException:
        await app.close()
        raise
    freeze_startup_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    stop.clear()  # a second signal cuts the drain short
    if not await stop_serving(running, app, cut_short=stop, threads=threads):
        # Within the bound, but something is left (an uninterruptible model call in a
        # worker thread): the interpreter's exit would wait for it without a bound.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


async def cmd_migrate(ns: argparse.Namespace, settings: Settings) -> int:
    """Apply pending migrations under the advisory lock (the chart's migration Job); exit 0."""
    from memplane.server.resources import migrate

    applied = await migrate(settings)
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


async def cmd_workspace(ns: argparse.Namespace, settings: Settings) -> int:
    async with admin_client(ns, settings) as client:
        if ns.action == "create":
            ws = await client.create_workspace(
                ns.name, quotas=admin_pb2.WorkspaceQuotas(max_memories=ns.max_memories), placement=ns.placement
            )
            print(
                f"created workspace {ws.name} ({ws.embedding_model}, {ws.embedding_dimensions}-d)"
                f" on database cluster {ws.placement or 'default'}"
            )
            key = await client.create_api_key(ws.name, "created by the CLI")
            print(f"key id {key.key_id}\nAPI key (shown once): {key.api_key}")
        elif ns.action == "delete":
            n = await client.delete_workspace(ns.name)
            print(f"deleted workspace {ns.name} and its {n} memories")
        else:
            token = ""
            while True:
                page = await client.list_workspaces(page_token=token)
                for ws in page.workspaces:
                    try:
                        usage = await client.get_workspace_usage(ws.name)
                        sizes = f"{usage.memory_count} memories\t{usage.storage_bytes} bytes"
                    except UnavailableError:  # its database cluster is down: the others are listed
                        sizes = "unavailable\t-"
                    print(f"{ws.name}\t{sizes}\t{ws.embedding_model}\tcluster {ws.placement or 'default'}")
                token = page.next_page_token
                if not token:
                    break
    return 0


async def cmd_key(ns: argparse.Namespace, settings: Settings) -> int:
    """`key create WORKSPACE` prints the key id and the key (shown once); `key list
    WORKSPACE` one line per key: id, state (valid, or revoked with its time), creation
    time, label; `key revoke KEY_ID`."""
    async with admin_client(ns, settings) as client:
        if ns.action == "create":
            reply = await client.create_api_key(ns.workspace, ns.display_name)
            print(f"key id {reply.key_id}\nAPI key (shown once): {reply.api_key}")
        elif ns.action == "list":
            token = ""
            while True:
                page = await client.list_api_keys(ns.workspace, page_token=token)
                for k in page.api_keys:
                    state = f"revoked {_utc(k.revoke_time)}" if k.HasField("revoke_time") else "valid"
                    print(f"{k.key_id}\t{state}\tcreated {_utc(k.create_time)}\t{k.display_name}")
                token = page.next_page_token
                if not token:
                    break
        else:
            await client.revoke_api_key(ns.key_id)
            print(f"revoked {ns.key_id}")
    return 0


async def cmd_add(ns: argparse.Namespace, settings: Settings) -> int:
    scope = memory_pb2.Scope(user_id=ns.user_id, agent_id=ns.agent_id, session_id=ns.session_id)
    mtype = memory_pb2.MemoryType.Value(f"MEMORY_TYPE_{ns.type.upper()}")
    async with workspace_client(ns, settings) as client:
        stored = await client.add_memories([memory_pb2.MemoryInput(content=ns.content, scope=scope, type=mtype)])
    print(stored[0].id)
    return 0


async def cmd_search(ns: argparse.Namespace, settings: Settings) -> int:
    flt = filter_pb2.MemoryFilter(user_id=ns.user_id, agent_id=ns.agent_id, session_id=ns.session_id)
    async with workspace_client(ns, settings) as client:
        reply = await client.search(ns.query, top_k=ns.top_k, min_relevance=ns.min_relevance, filter=flt)
    for i, hit in enumerate(reply.hits, start=1):
        text = " ".join(hit.memory.content.split())
        if hit.memory.description:  # e.g. "[8 May 2023] Caroline" for a conversation turn
            text = f"{hit.memory.description}: {text}"
        shown = text if len(text) <= 150 else text[:147] + "..."
        print(f"{i:>2}. {hit.score:.3f}  relevance {hit.relevance:.2f}  {shown}")
    if not reply.hits:
        print("no memories found")
    return 0


async def cmd_health(ns: argparse.Namespace, settings: Settings) -> int:
    """grpc.health.v1 Check of the server (or one service); exit 0 only when SERVING.
    With ``--wait SECONDS``, a server not reachable yet (starting, or a new Pod that the
    cluster's NetworkPolicy agent has not admitted yet) is waited for up to SECONDS.
    The chart's `helm test` Pod runs it with ``--wait 60``."""
    async with workspace_client(ns, settings) as client:
        if ns.wait > 0:
            try:
                async with asyncio.timeout(ns.wait):
                    status = await client.check_health(ns.service, wait_for_ready=True)
            except TimeoutError:
                print(f"{ns.service or 'server'}: not reachable within {ns.wait:g} s", file=sys.stderr)
                return 1
        else:
            status = await client.check_health(ns.service)
    print(f"{ns.service or 'server'}: {status}")
    return 0 if status == "SERVING" else 1


def _seconds(text: str) -> float:
    """A non-negative, finite number of seconds (argparse type); argparse names the flag on error."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, not {text!r}")
    return value


def _utc(ts: timestamp_pb2.Timestamp) -> str:
    return ts.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _add_admin_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`workspace create|delete|list` and `key create|list|revoke` (admin key)."""
    p = sub.add_parser("workspace", help="create, delete or list workspaces (admin key)")
    wsub = p.add_subparsers(dest="action", required=True)
    c = wsub.add_parser("create")
    c.add_argument("name")
    c.add_argument("--max-memories", type=int, default=0, help="quota; 0 = unlimited")
    c.add_argument(
        "--placement", default="", help="database cluster to hold it (database.clusters); default: the least used"
    )
    d = wsub.add_parser("delete")
    d.add_argument("name")
    wsub.add_parser("list")
    for q in (c, d, wsub.choices["list"]):
        add_connection_flags(q)
    p.set_defaults(func=cmd_workspace)

    p = sub.add_parser("key", help="create, list or revoke API keys (admin key)")
    ksub = p.add_subparsers(dest="action", required=True)
    c = ksub.add_parser("create")
    c.add_argument("workspace")
    c.add_argument("--display-name", default="")
    k = ksub.add_parser("list", help="a workspace's keys, revoked ones included")
    k.add_argument("workspace")
    r = ksub.add_parser("revoke")
    r.add_argument("key_id")
    for q in (c, k, r):
        add_connection_flags(q)
    p.set_defaults(func=cmd_key)


def build_parser(settings: Settings | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; help texts show the defaults *settings* (the environment's)
    give, e.g. the port of MEMPLANE_GRPC__PORT."""
    from memplane.cli import compact, console, locomo, markdown, select, sync, transfer

    settings = settings or Settings()

    parser: argparse.ArgumentParser = Parser(
        prog="memplane", description="Multi-tenant long-term memory for LLM agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the gRPC server (embedded PostgreSQL unless MEMPLANE_DATABASE__DSN is set)")
    p.add_argument("--services", default="retrieval,writeback,compaction,admin", help="comma-separated subset to serve")
    p.add_argument("--host", default=None, help=f"address to bind (default {settings.grpc.host}: MEMPLANE_GRPC__HOST)")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port (default {settings.grpc.port}: MEMPLANE_GRPC__PORT; 0 picks a free one)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        choices=range(1, 65),
        metavar="N",
        help=f"server processes on the one port, 1-64 (default {settings.grpc.workers}: MEMPLANE_GRPC__WORKERS)",
    )
    p.add_argument(
        "--no-migrate",
        action="store_true",
        help="apply no migrations (MEMPLANE_DATABASE__MIGRATE_ON_START=false): `memplane migrate` runs them; "
        "the server refuses to start while any is pending",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("migrate", help="apply database migrations (serve also does, unless told not to)")
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("health", help="check the server's grpc.health.v1 status (exit 0 when SERVING)")
    p.add_argument("--service", default="", help="a service's full name, e.g. memplane.v1.RetrievalService")
    p.add_argument(
        "--wait",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS (>= 0) for the server to be reachable",
    )
    add_connection_flags(p)
    p.set_defaults(func=cmd_health)

    _add_admin_parsers(sub)

    for name, func, helptext in (("add", cmd_add, "store one memory"), ("search", cmd_search, "hybrid search")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("content" if name == "add" else "query")
        p.add_argument("--user-id", default="")
        p.add_argument("--agent-id", default="")
        p.add_argument("--session-id", default="")
        if name == "add":
            p.add_argument(
                "--type",
                default="user",
                choices=["user", "feedback", "project", "reference", "procedural", "tool", "episodic"],
            )
        else:
            p.add_argument("--top-k", type=int, default=5)
            p.add_argument(
                "--min-relevance",
                type=float,
                default=0.0,
                metavar="R",
                help="only hits whose absolute relevance is at least R (0..1; 0, the default, keeps all)",
            )
        add_connection_flags(p)
        p.set_defaults(func=func)

    # Listed here for `memplane --help`; main() hands `memplane mcp ...` to its own parser.
    p = sub.add_parser(
        "mcp",
        help="MCP server (stdio or streamable HTTP) over a workspace; needs only 'memplane[mcp]' "
        "(`memplane mcp --help`)",
        add_help=False,
    )
    p.add_argument("args", nargs=argparse.REMAINDER)

    p = sub.add_parser("import", help="import a workspace export, or a benchmark dataset into workspaces")
    imports = p.add_subparsers(dest="format", required=True)
    p = sub.add_parser("export", help="export the key's workspace")
    exports = p.add_subparsers(dest="format", required=True)
    locomo.add_parsers(sub, imports)
    transfer.add_parsers(imports, exports)
    markdown.add_parsers(exports)
    compact.add_parsers(sub)
    sync.add_parsers(sub)
    select.add_parsers(sub)
    console.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `memplane` script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["mcp"]:  # its own parser; the script reaches it through memplane.cli.entry, without settings
        from memplane.integrations.mcp.cli import main as mcp_main

        return mcp_main(args[1:], parser_class=Parser)
    settings = Settings()
    ns = build_parser(settings).parse_args(args)
    _setup_logging(settings)
    try:
        return int(asyncio.run(ns.func(ns, settings)))
    except MemplaneError as error:
        print(f"memplane: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
