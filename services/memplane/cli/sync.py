"""`memplane sync DIR`: two-way sync of the key's workspace with the local sandbox DIR
(the local backend's directory of one workspace: ``DIR/Memory/``), one pass or, with
``--watch SECONDS``, one pass every SECONDS until interrupted (a pass the server does not
answer is reported and tried again at the next one). `memplane restore ID`
stores a memory deleted by a sync (its file deleted) again from its history."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from memplane.cli.connect import add_connection_flags, workspace_client
from memplane.domain.names import WORKSPACE_NAME
from memplane.errors import DeadlineExceededError, UnavailableError
from memplane.filesync import SyncReport, restore_deleted, sync_once
from memplane.mdview.render import INDEX_MAX_TOKENS
from memplane.sandbox import LocalSandboxes
from memplane.server.settings import Settings
from memplane.server.telemetry import setup_telemetry
from memplane.text.tokens import DEFAULT_ENCODING, ENCODINGS, token_counter
from memplane.v1 import memory_pb2


def _summary(report: SyncReport) -> str:
    parts = [
        f"{len(report.updated)} updated",
        f"{len(report.added)} added",
        f"{len(report.deleted)} deleted",
        f"{len(report.conflicts)} conflicts",
        f"{len(report.problems)} problems",
        f"{len(report.written)} files written",
        f"{len(report.removed)} removed",
    ]
    lines = [f"sync: {', '.join(parts)}"]
    lines += [f"  {path}: {why}" for path, why in sorted(report.problems.items())]
    return "\n".join(lines)


async def cmd_sync(ns: argparse.Namespace, settings: Settings) -> int:
    """Sync once (or every --watch seconds); a summary on stderr per pass. Exit 0, or 2
    for a DIR whose last part is not a workspace-name-shaped directory name."""
    directory = await asyncio.to_thread(Path(ns.directory).resolve)
    if not WORKSPACE_NAME.match(directory.name):
        print(
            f"memplane: DIR {directory.name!r} must be named like a workspace (a-z, 0-9, '-'): "
            "the local backend keeps each workspace's sandbox at ROOT/<workspace>",
            file=sys.stderr,
        )
        return 2
    setup_telemetry()  # the problem events of each pass, exported where OTEL_EXPORTER_OTLP_ENDPOINT says
    backend = LocalSandboxes(directory.parent)
    handle = await backend.ensure(directory.name)
    scope = memory_pb2.Scope(user_id=ns.user_id, agent_id=ns.agent_id)
    count = token_counter(ns.encoding).count_text
    async with workspace_client(ns, settings) as client:
        while True:
            try:
                report = await sync_once(
                    client, backend, handle, count_tokens=count, scope=scope, max_index_tokens=ns.max_index_tokens
                )
            except (UnavailableError, DeadlineExceededError) as error:
                if not ns.watch:
                    raise
                print(f"sync: {type(error).__name__}: {error}; trying again in {ns.watch:g} s", file=sys.stderr)
            else:
                print(_summary(report), file=sys.stderr)
            if not ns.watch:
                return 0
            await asyncio.sleep(ns.watch)  # the poll interval, not a synchronisation


async def cmd_restore(ns: argparse.Namespace, settings: Settings) -> int:
    """Store the deleted memory ID again; prints the new id."""
    async with workspace_client(ns, settings) as client:
        memory = await restore_deleted(client, ns.memory_id)
    print(memory.id)
    return 0


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def add_parsers(sub: Any) -> None:
    """Register `sync` and `restore` on the CLI's subparsers."""
    p = sub.add_parser("sync", help="two-way sync of the key's workspace with a local sandbox directory (DIR/Memory)")
    p.add_argument("directory", help="the sandbox directory; its name must be workspace-shaped (a-z, 0-9, '-')")
    p.add_argument("--watch", type=_positive, default=None, metavar="SECONDS", help="sync again every SECONDS")
    p.add_argument("--user-id", default="", help="scope of memories added from new files")
    p.add_argument("--agent-id", default="", help="scope of memories added from new files")
    p.add_argument(
        "--max-index-tokens",
        type=int,
        default=INDEX_MAX_TOKENS,
        help=f"bound of MEMORY.md (default {INDEX_MAX_TOKENS})",
    )
    p.add_argument("--encoding", choices=sorted(ENCODINGS), default=DEFAULT_ENCODING, help="tokenizer of the bound")
    add_connection_flags(p)
    p.set_defaults(func=cmd_sync)
    p = sub.add_parser(
        "restore", help="store a deleted memory (e.g. its file deleted by mistake) again from its history"
    )
    p.add_argument("memory_id")
    add_connection_flags(p)
    p.set_defaults(func=cmd_restore)
