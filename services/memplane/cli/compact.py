"""`memplane compact locomo PATH`: CompactionService on a LoCoMo conversation.

A runnable example of the pre-reasoning hook. An "agent" replays one LoCoMo conversation
session by session (speaker A as the user, speaker B as the assistant, each turn's
dia_id as the message id, the session's date as its time); before each of its turns'
model calls it sends its context to PrepareContext with the running summary, keeps the
messages the reply returns and the new summary, exactly as an AgentScope / ReMe agent
would. A table shows each step; the end shows the summary and the session transcript,
which still holds every message (the compacted ones marked).

Talks to a running server with the workspace key (flag, env or the local credentials).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from google.protobuf import timestamp_pb2

from memplane.cli.connect import add_connection_flags, workspace_client
from memplane.eval.locomo import Conversation, LocomoFormatError, load_locomo
from memplane.server.settings import Settings
from memplane.v1 import compaction_pb2, memory_pb2


def conversation_messages(conversation: Conversation) -> list[list[compaction_pb2.ContextMessage]]:
    """The conversation's sessions as lists of context messages (A = user, B = assistant)."""
    out = []
    for session in conversation.sessions:
        when = timestamp_pb2.Timestamp()
        when.FromDatetime(session.time)
        messages = []
        for turn in session.turns:
            role = (
                memory_pb2.MESSAGE_ROLE_USER
                if turn.speaker == conversation.speaker_a
                else (memory_pb2.MESSAGE_ROLE_ASSISTANT)
            )
            text = compaction_pb2.ContentBlock(text=compaction_pb2.TextBlock(text=turn.content()))
            messages.append(
                compaction_pb2.ContextMessage(
                    id=turn.dia_id, role=role, name=turn.speaker, content=[text], create_time=when
                )
            )
        out.append(messages)
    return out


async def cmd_compact_locomo(ns: argparse.Namespace, settings: Settings) -> int:
    """Replay one conversation through PrepareContext; print each step and the result."""
    try:
        conversations = load_locomo(Path(ns.path))
    except (OSError, LocomoFormatError) as error:
        print(f"memplane: cannot read {ns.path}: {error}", file=sys.stderr)
        return 2
    chosen = [c for c in conversations if c.sample_id == ns.conversation] if ns.conversation else conversations[:1]
    if not chosen:
        print(f"memplane: no conversation {ns.conversation!r} in {ns.path}", file=sys.stderr)
        return 2
    conversation = chosen[0]
    sessions = conversation_messages(conversation)[: ns.sessions]
    session_id = f"compact-{conversation.sample_id}-{ns.run}"
    scope = memory_pb2.Scope(user_id=conversation.speaker_a, session_id=session_id)
    context: list[compaction_pb2.ContextMessage] = []
    summary = ""
    print(
        f"{conversation.sample_id}: {conversation.speaker_a} (user) and {conversation.speaker_b} (assistant), "
        f"{sum(len(s) for s in sessions)} turns in {len(sessions)} sessions; window {ns.max_input_tokens} tokens"
    )
    print(f"{'session':>7} {'sent':>5} {'tokens':>7} {'kept':>5} {'compacted':>9} {'method':>13} {'summary':>8}")
    async with workspace_client(ns, settings) as client:
        for number, session in enumerate(sessions, start=1):
            context.extend(session)
            reply = await client.prepare_context(
                context,
                system_prompt=f"You are {conversation.speaker_b}, chatting with {conversation.speaker_a}.",
                previous_summary=summary,
                max_input_tokens=ns.max_input_tokens,
                scope=scope,
                write_memories=ns.write_memories,
            )
            method = "-"
            compacted = 0
            if reply.HasField("compaction"):
                method = compaction_pb2.SummaryMethod.Name(reply.compaction.method).removeprefix("SUMMARY_METHOD_")
                compacted = reply.compaction.compacted_message_count
                if not reply.compaction.compacted:
                    method = f"{method} ({reply.compaction.failure})"
            tokens = reply.split.total_tokens
            print(
                f"{number:>7} {len(context):>5} {tokens:>7} {len(reply.messages):>5} {compacted:>9} "
                f"{method:>13} {reply.compaction.summary_tokens if compacted else 0:>8}"
            )
            context = list(reply.messages)
            summary = reply.summary
        transcript: list[compaction_pb2.TranscriptMessage] = []
        token = ""
        while True:
            page = await client.get_transcript(session_id, page_size=1000, page_token=token)
            transcript.extend(page.messages)
            token = page.next_page_token
            if not token:
                break
    lines = summary.splitlines()
    print(f"\nrunning summary ({len(lines)} lines):")
    print("\n".join(lines[: ns.show_lines]) + ("\n..." if len(lines) > ns.show_lines else ""))
    marked = len([m for m in transcript if m.compacted])
    print(
        f"\ntranscript {session_id!r}: {len(transcript)} messages stored, {marked} of them marked compacted; "
        f"{len(context)} messages left in the agent's context"
    )
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`memplane compact locomo`."""
    p = sub.add_parser("compact", help="CompactionService examples")
    csub = p.add_subparsers(dest="action", required=True)
    c = csub.add_parser("locomo", help="replay a LoCoMo conversation through PrepareContext")
    c.add_argument("path", help="path to locomo10.json (never shipped with memplane)")
    c.add_argument("--conversation", default="", help="sample id, e.g. conv-26 (default: the first)")
    c.add_argument("--sessions", type=int, default=None, help="replay only the first N sessions")
    c.add_argument("--max-input-tokens", type=int, default=4000, help="the agent model's window (default 4000)")
    c.add_argument("--write-memories", action="store_true", help="also turn compacted spans into memories")
    c.add_argument("--show-lines", type=int, default=15, help="summary lines to print")
    c.add_argument("--run", default="1", help="suffix of the transcript session id")
    add_connection_flags(c)
    c.set_defaults(func=cmd_compact_locomo)
