"""`memplane export jsonl` and `memplane import jsonl`: a workspace (the key's) to a JSONL
file and back (memplane.client.transfer; the format in memplane.client.export_format)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from memplane.cli.connect import add_connection_flags, workspace_client
from memplane.cli.usage import UsageError
from memplane.client.transfer import IMPORT_BATCH_SIZE, export_workspace, import_workspace
from memplane.server.settings import Settings


async def cmd_export_jsonl(ns: argparse.Namespace, settings: Settings) -> int:
    """Write the export to FILE (stdout for "-"); a summary line on stderr. A failed
    export leaves FILE without its end line (and a FILE given by name is removed)."""
    async with workspace_client(ns, settings) as client:
        if ns.file == "-":
            summary = await export_workspace(client, sys.stdout, history=ns.history)
        else:
            path = Path(ns.file)
            out = await asyncio.to_thread(path.open, "w", encoding="utf-8")
            try:
                with out:
                    summary = await export_workspace(client, out, history=ns.history)
            except BaseException:
                await asyncio.to_thread(path.unlink, missing_ok=True)
                raise
    print(f"exported {summary.memory_count} memories and {summary.event_count} history events", file=sys.stderr)
    return 0


async def cmd_import_jsonl(ns: argparse.Namespace, settings: Settings) -> int:
    """Import FILE (stdin for "-") into the key's workspace; print the count, and with
    --id-map write "old-id<TAB>new-id" lines to that file (opened before the import, so a
    path that cannot be written stops it before anything is stored; removed if it fails)."""
    if ns.file == "-":
        text = await asyncio.to_thread(sys.stdin.read)
    else:
        data = await asyncio.to_thread(Path(ns.file).read_bytes)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise UsageError(f"{ns.file}: not UTF-8 text (byte {error.start}: {error.reason})") from None
    id_map = await asyncio.to_thread(Path(ns.id_map).open, "w", encoding="utf-8") if ns.id_map else None
    try:
        async with workspace_client(ns, settings) as client:
            summary = await import_workspace(client, text.splitlines(), batch_size=ns.batch_size)
        if id_map is not None:
            with id_map:
                id_map.writelines(f"{old}\t{new}\n" for old, new in summary.id_map.items())
    except BaseException:
        if id_map is not None:
            id_map.close()
            await asyncio.to_thread(Path(ns.id_map).unlink, missing_ok=True)
        raise
    events = summary.skipped_event_count
    note = f" ({events} history events read, not replayed)" if events else ""
    print(f"imported {summary.memory_count} memories{note}")
    return 0


def _batch_size(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 256:  # the server's default limits.max_batch_size
        raise argparse.ArgumentTypeError("must be 1 to 256 (the server's default batch limit)")
    return value


def add_parsers(imports: Any, exports: Any) -> None:
    """Register `jsonl` on the subparsers of `memplane import` and `memplane export`."""
    p = exports.add_parser("jsonl", help="every memory of the key's workspace as JSON lines (workspace key)")
    p.add_argument("file", nargs="?", default="-", help='output file (default "-": stdout)')
    p.add_argument("--history", action="store_true", help="also each memory's history events")
    add_connection_flags(p)
    p.set_defaults(func=cmd_export_jsonl)

    p = imports.add_parser(
        "jsonl", help="store the memories of a `memplane export jsonl` file in the key's workspace (all or nothing)"
    )
    p.add_argument("file", help='the export file ("-": stdin)')
    p.add_argument(
        "--batch-size",
        type=_batch_size,
        default=IMPORT_BATCH_SIZE,
        help=f"memories per AddMemories call (default {IMPORT_BATCH_SIZE})",
    )
    p.add_argument("--id-map", default="", help='write "exported-id<TAB>new-id" lines to this file')
    add_connection_flags(p)
    p.set_defaults(func=cmd_import_jsonl)
