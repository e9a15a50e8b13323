"""The cost model of write-back extraction (WriteConversation with extract) on LoCoMo,
against the scripted OpenAI-compatible server of tests/fake_llm.py (real HTTP through the
`openai` client; the model's work replaced by a fixed --model-latency per call).

LoCoMo sessions are cut into writes of --turns turns (speaker A as the user, B as the
assistant, the session's date as the turns' time), one user_id per LoCoMo conversation,
so that later writes of a user find stored memories and are reconciled (call 2). The
scripted model answers call 1 with one `user` memory per user turn and call 2 with ADD
for every fact (NOOP for every fourth), so the figures measure memplane's own work
around the model: prompts, embedding, the neighbour search, the job's transaction.

For 1 and --writers concurrent writers, --writes writes each in three modes:
- episodic: WriteConversation without extract (the reference: today's request path);
- queued: with extract, no wait (the request path with the job queued), then every job
  waited for: queue wait grows when writers outrun the workers (extraction.workers);
- wait: with extract and wait (the job runs in the request when no worker holds it).
Prints per mode request p50/p99 and its ratio to the reference; per job (from
GetExtractionJob.cost) queue / LLM / embedding / database p50; and per 100 turns the
LLM calls and the prompt / completion tokens, counted with o200k_base (quicktok) over
the prompts the server really sent and the answers it got.

Run: `python bench/extraction_cost.py` (~3 min); dry run
`python bench/extraction_cost.py --writes 6 --writers 4 --model-latency 0.1`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _harness import (
    bench_server,
    closing_banner,
    common_args,
    duration_seconds,
    environment_banner,
    log,
    ms,
    pct,
    print_table,
    run_load,
)

from memplane.server.settings import ExtractionSettings, LLMSettings
from memplane.text.tokens import token_counter
from memplane.v1 import memory_pb2, writeback_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the scripted server lives in tests/
from tests.fake_llm import Delay, FakeLLM, Respond

USER, ASSISTANT = memory_pb2.MESSAGE_ROLE_USER, memory_pb2.MESSAGE_ROLE_ASSISTANT
LINE = re.compile(r"^\[([^\]]+)\] \[[^\]]+\] (user|assistant)(?: \([^)]*\))?: (.*)$", re.M)
FACT = re.compile(r"^F(\d+) ", re.M)


def writes(path: Path, turns: int) -> list[tuple[str, list[writeback_pb2.ConversationMessage]]]:
    """(user_id, messages) of every LoCoMo session cut into writes of *turns* turns."""
    out = []
    for n, sample in enumerate(json.loads(path.read_text())):
        conv = sample["conversation"]
        a = conv["speaker_a"]
        sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
        for key in sessions:
            when = datetime.strptime(conv[f"{key}_date_time"], "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            batch: list[writeback_pb2.ConversationMessage] = []
            for turn in conv[key]:
                text = " ".join(str(turn.get("text", "")).split())
                if not text:
                    continue
                role = USER if turn["speaker"] == a else ASSISTANT
                message = writeback_pb2.ConversationMessage(
                    id=turn["dia_id"],
                    role=role,
                    name=turn["speaker"],
                    content=text,
                )
                message.create_time.FromDatetime(when)
                batch.append(message)
                if len(batch) == turns:
                    out.append((f"locomo-{n}", batch))
                    batch = []
            if batch:
                out.append((f"locomo-{n}", batch))
    return out


def scripted(latency: float, answers: list[str]) -> Respond:
    """The scripted model: call 1 -> a user memory per user turn; call 2 -> ADD (NOOP on
    [1] for every fourth fact). Each answer after *latency* seconds, logged in *answers*."""

    def reply(body: dict[str, Any]) -> Delay:
        prompt = body["messages"][1]["content"]
        if "Stored memories:" in prompt:
            ops = [
                {"operation": "NOOP", "fact": n, "memory": 1} if n % 4 == 0 else {"operation": "ADD", "fact": n}
                for n in map(int, FACT.findall(prompt))
            ]
            text = json.dumps({"operations": ops})
        else:
            facts = [
                {"type": "user", "name": " ".join(t.split()[:6]), "description": "", "content": t[:300],
                 "speaker": "user", "message_ids": [i]}
                for i, role, t in LINE.findall(prompt) if role == "user"
            ]  # fmt: skip
            text = json.dumps({"memories": facts, "forget": []})
        answers.append(text)
        return Delay(latency, text)

    return Respond(reply)


async def phase(
    stack: Any, fake: FakeLLM, items: Sequence[tuple[str, list[Any]]], *, mode: str, writers: int, budget: float
) -> dict[str, Any]:
    """One mode at one concurrency: request latencies, and each job's cost once finished."""
    clients = [stack.client(timeout=budget) for _ in range(writers)]
    run = uuid.uuid4().hex[:8]
    jobs: list[str] = []

    async def call(i: int) -> None:
        user_id, messages = items[i]
        scope = memory_pb2.Scope(user_id=user_id, session_id=f"{run}-{i}")
        reply = await clients[i % writers].write_conversation(
            scope, messages, extract=mode != "episodic", wait=mode == "wait"
        )
        if reply.HasField("extraction_job"):
            jobs.append(reply.extraction_job.id)

    result = await run_load(call, concurrency=writers, requests=len(items), max_seconds=budget)
    finished = []
    deadline = time.monotonic() + budget
    for job_id in jobs:  # bounded poll of the queued jobs (a benchmark, not a test)
        while True:
            job = await clients[0].get_extraction_job(job_id)
            if job.status in (writeback_pb2.EXTRACTION_JOB_STATUS_DONE, writeback_pb2.EXTRACTION_JOB_STATUS_FAILED):
                finished.append(job)
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    for client in clients:
        await client.close()
    return {"latencies": result.latencies, "errors": result.errors, "jobs": finished}


async def main(args: argparse.Namespace) -> None:
    environment_banner("extraction_cost", args)
    items = writes(args.locomo, args.turns)
    per_level = args.writes
    counter = token_counter("o200k_base")
    answers: list[str] = []
    rows: list[list[Any]] = []
    cost_rows: list[list[Any]] = []
    with FakeLLM() as fake:
        llm = LLMSettings(base_url=fake.base_url, model="scripted", timeout=60.0, max_retries=0)
        async with bench_server(llm=llm, extraction=ExtractionSettings(workers=args.workers)) as stack:
            async with stack.client() as warm:  # the first write loads the embedder and the pool
                _, messages = items[0]
                await warm.write_conversation(memory_pb2.Scope(user_id="warm-up", session_id="warm-up"), messages)
            offset = 1
            for writers in (1, args.writers):
                reference = None
                for mode in ("episodic", "queued", "wait"):
                    batch = items[offset : offset + per_level]
                    offset += per_level
                    fake.reset()
                    answers.clear()
                    if mode != "episodic":
                        fake.script(*[scripted(args.model_latency, answers)] * (2 * len(batch)))
                    log(f"{writers} writer(s), {mode}: {len(batch)} writes")
                    got = await phase(stack, fake, batch, mode=mode, writers=writers, budget=args.max_seconds)
                    p50 = pct(got["latencies"], 50)
                    reference = p50 if mode == "episodic" else reference
                    turns = sum(len(m) for _, m in batch)
                    rows.append(
                        [writers, mode, len(got["latencies"]), got["errors"], ms(p50), ms(pct(got["latencies"], 99)),
                         p50 / reference if reference else float("nan")]
                    )  # fmt: skip
                    if mode == "episodic":
                        continue
                    jobs = got["jobs"]
                    for reason in sorted({j.error for j in jobs if j.error}):
                        log(f"a job attempt failed: {reason}")
                    prompts = [m["content"] for r in fake.requests for m in r.get("messages", [])]
                    per100 = 100.0 / turns
                    cost_rows.append(
                        [
                            writers, mode, len(jobs),
                            sum(j.status == writeback_pb2.EXTRACTION_JOB_STATUS_FAILED for j in jobs),
                            len(fake.requests) * per100,
                            sum(counter.count_texts(prompts)) * per100,
                            sum(counter.count_texts(answers)) * per100,
                            ms(pct([duration_seconds(j.cost.queue_duration) for j in jobs], 50)),
                            ms(pct([duration_seconds(j.cost.llm_duration) for j in jobs], 50)),
                            ms(pct([duration_seconds(j.cost.embedding_duration) for j in jobs], 50)),
                            ms(pct([duration_seconds(j.cost.database_duration) for j in jobs], 50)),
                        ]
                    )  # fmt: skip
    print_table(
        "WriteConversation request latency (ratio: p50 over the episodic reference at the same writers)",
        ["writers", "mode", "calls", "errors", "p50 ms", "p99 ms", "x episodic"],
        rows,
    )
    print_table(
        f"Per job and per 100 turns (model latency {args.model_latency:.2f} s per call, scripted; tokens o200k_base)",
        ["writers", "mode", "jobs", "failed", "LLM calls/100t", "prompt tok/100t", "completion tok/100t",
         "queue p50 ms", "LLM p50 ms", "embed p50 ms", "DB p50 ms"],
        cost_rows,
    )  # fmt: skip
    closing_banner()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_args(parser)
    parser.add_argument("--turns", type=int, default=10, help="turns per WriteConversation")
    parser.add_argument("--writes", type=int, default=20, help="writes per mode and concurrency")
    parser.add_argument("--writers", type=int, default=8, help="the concurrent level besides 1")
    parser.add_argument("--workers", type=int, default=2, help="extraction.workers of the server")
    parser.add_argument("--model-latency", type=float, default=0.5, help="seconds the scripted model takes per call")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="wall-clock budget per phase")
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
