"""`memplane select QUERY`: SelectMemoryFiles from the command line — the memory files
most useful for QUERY, picked by the server's LLM (or by hybrid search without one),
printed as ``==> Memory/<file>.md <==`` and the file's content, one after another; a
line on stderr says who picked them (and why the search did)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from memplane.cli.connect import add_connection_flags, workspace_client
from memplane.server.settings import Settings
from memplane.v1 import filter_pb2, retrieval_pb2


async def cmd_select(ns: argparse.Namespace, settings: Settings) -> int:
    """Print the selected files; exit 0 (also when none was picked)."""
    flt = filter_pb2.MemoryFilter(user_id=ns.user_id, agent_id=ns.agent_id, session_id=ns.session_id)
    async with workspace_client(ns, settings) as client:
        reply = await client.select_memory_files(ns.query, filter=flt, max_files=ns.max_files, max_tokens=ns.max_tokens)
    method = retrieval_pb2.SelectionMethod.Name(reply.method).removeprefix("SELECTION_METHOD_").lower()
    note = f" ({reply.fallback_reason})" if reply.fallback_reason else ""
    print(
        f"{len(reply.files)} of {reply.offered_count} memory files picked by {method}{note}",
        file=sys.stderr,
    )
    for i, file in enumerate(reply.files):
        cut = ", truncated" if file.truncated else ""
        print(f"{'' if i == 0 else chr(10)}==> {file.path} <== ({file.content_tokens} tokens{cut})")
        print(file.content, end="" if file.content.endswith("\n") else "\n")
    return 0


def add_parsers(sub: Any) -> None:
    """Register `select` on the top-level subparsers."""
    p = sub.add_parser(
        "select",
        help="the memory files most useful for a query, picked by the server's LLM (hybrid search without one)",
    )
    p.add_argument("query")
    p.add_argument("--user-id", default="")
    p.add_argument("--agent-id", default="")
    p.add_argument("--session-id", default="")
    p.add_argument("--max-files", type=int, default=0, help="1 to 5 (default 5)")
    p.add_argument("--max-tokens", type=int, default=0, help="tokens of all contents together (default 10,000)")
    add_connection_flags(p)
    p.set_defaults(func=cmd_select)
