"""The write-back jobs view's backend: the workspace's extraction jobs (ListExtractionJobs).

    GET api/jobs?status=&page_token= -> {jobs, next_page_token}

`status` is one of queued, running, done, failed, or "pending" (queued and running and
failed: what is waiting or needs a look); empty: every job.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memplane.console import inputs
from memplane.console.errors import BadRequestError
from memplane.console.sessions import Session
from memplane.v1 import writeback_pb2

PAGE_SIZE = 25
STATUSES: dict[str, list[int]] = {
    "": [],
    "queued": [writeback_pb2.EXTRACTION_JOB_STATUS_QUEUED],
    "running": [writeback_pb2.EXTRACTION_JOB_STATUS_RUNNING],
    "done": [writeback_pb2.EXTRACTION_JOB_STATUS_DONE],
    "failed": [writeback_pb2.EXTRACTION_JOB_STATUS_FAILED],
    "pending": [
        writeback_pb2.EXTRACTION_JOB_STATUS_QUEUED,
        writeback_pb2.EXTRACTION_JOB_STATUS_RUNNING,
        writeback_pb2.EXTRACTION_JOB_STATUS_FAILED,
    ],
}


def _time(message: Any, field: str) -> str:
    return str(getattr(message, field).ToJsonString()) if message.HasField(field) else ""


def job(j: writeback_pb2.ExtractionJob) -> dict[str, Any]:
    """A job: id, status word, attempts, error, scope, message and memory ids, the
    operations (operation, fact, memory_id, outcome), model, times, the failed
    attempts, and the cost (LLM calls, tokens)."""
    status: str = writeback_pb2.ExtractionJobStatus.Name(j.status)
    return {
        "id": j.id,
        "status": status.removeprefix("EXTRACTION_JOB_STATUS_").lower(),
        "attempt_count": j.attempt_count,
        "error": j.error,
        "scope": {"user_id": j.scope.user_id, "agent_id": j.scope.agent_id, "session_id": j.scope.session_id},
        "message_ids": list(j.message_ids),
        "memory_ids": list(j.memory_ids),
        "operations": [
            {
                "operation": o.operation,
                "fact": o.fact,
                "memory": o.memory,
                "memory_id": o.memory_id,
                "outcome": o.outcome,
            }
            for o in j.operations
        ],
        "model": j.model,
        "create_time": _time(j, "create_time"),
        "update_time": _time(j, "update_time"),
        "failed_attempts": [
            {"attempt": f.attempt, "error": f.error, "fail_time": _time(f, "fail_time")} for f in j.failed_attempts
        ],
        "cost": {
            "llm_call_count": j.cost.llm_call_count,
            "prompt_tokens": j.cost.prompt_tokens,
            "completion_tokens": j.cost.completion_tokens,
        },
    }


async def list_jobs(request: Request, session: Session) -> Response:
    """A page of 25 jobs, newest first, in the chosen state."""
    query = request.query_params
    word = inputs.text(query, "status", max_chars=16)
    if word not in STATUSES:
        raise BadRequestError(f"status: {word!r} is not one of {', '.join(repr(s) for s in STATUSES if s)}")
    reply = await session.client.list_extraction_jobs(
        statuses=STATUSES[word],
        page_size=PAGE_SIZE,
        page_token=inputs.text(query, "page_token", max_chars=4_096),
    )
    return JSONResponse({"jobs": [job(j) for j in reply.jobs], "next_page_token": reply.next_page_token})
