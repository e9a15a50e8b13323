"""`memplane export markdown DIR`: the key's workspace as the Markdown view
(memplane.mdview) under DIR — ``DIR/Memory/MEMORY.md``, one file per memory, the
journal — as the sandboxes hold it. Files of the view are (over)written; other files
under DIR are left alone."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memplane.cli.connect import add_connection_flags, workspace_client
from memplane.client.transfer import list_all_memories
from memplane.filesync.convert import memory_from_proto
from memplane.mdview import render_view
from memplane.mdview.render import INDEX_MAX_TOKENS
from memplane.server.settings import Settings
from memplane.text.tokens import DEFAULT_ENCODING, ENCODINGS, token_counter


def _write_files(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


async def cmd_export_markdown(ns: argparse.Namespace, settings: Settings) -> int:
    """Render the workspace's current memories into DIR; a summary line on stderr."""
    async with workspace_client(ns, settings) as client:
        memories = [memory_from_proto(m) for m in await list_all_memories(client)]
    view = render_view(
        memories,
        now=datetime.now(UTC),
        count_tokens=token_counter(ns.encoding).count_text,
        max_index_tokens=ns.max_index_tokens,
    )
    await asyncio.to_thread(_write_files, Path(ns.directory), view.files)
    print(
        f"wrote {len(view.files)} files to {ns.directory}: MEMORY.md lists {view.listed} memory files"
        + (f" ({view.unlisted} left out by the {ns.max_index_tokens}-token bound)" if view.unlisted else ""),
        file=sys.stderr,
    )
    return 0


def add_parsers(exports: Any) -> None:
    """Register `markdown` on the subparsers of `memplane export`."""
    p = exports.add_parser("markdown", help="the key's workspace as AgentScope-style Markdown files (Memory/MEMORY.md)")
    p.add_argument("directory", help="where Memory/ is written")
    p.add_argument(
        "--max-index-tokens",
        type=int,
        default=INDEX_MAX_TOKENS,
        help=f"bound of MEMORY.md in tokens (default {INDEX_MAX_TOKENS}, AgentScope's memory_max_tokens)",
    )
    p.add_argument("--encoding", choices=sorted(ENCODINGS), default=DEFAULT_ENCODING, help="tokenizer of the bound")
    add_connection_flags(p)
    p.set_defaults(func=cmd_export_markdown)
