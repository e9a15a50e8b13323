"""Wire form of extraction jobs (`memplane.domain.extraction`)."""

from __future__ import annotations

from collections.abc import Iterable

from memplane.convert import duration, timestamp
from memplane.domain.extraction import ExtractionJob, JobStatus
from memplane.errors import FieldViolation, InvalidArgumentError
from memplane.v1 import memory_pb2, writeback_pb2

_STATUS = {
    JobStatus.QUEUED: writeback_pb2.EXTRACTION_JOB_STATUS_QUEUED,
    JobStatus.RUNNING: writeback_pb2.EXTRACTION_JOB_STATUS_RUNNING,
    JobStatus.DONE: writeback_pb2.EXTRACTION_JOB_STATUS_DONE,
    JobStatus.FAILED: writeback_pb2.EXTRACTION_JOB_STATUS_FAILED,
}


_STATUS_FROM_PROTO = {value: status for status, value in _STATUS.items()}


def statuses_from_proto(values: Iterable[int], field: str) -> list[JobStatus]:
    """The JobStatus of each ExtractionJobStatus value. Raises `InvalidArgumentError`
    naming *field*[i] for UNSPECIFIED or an unknown value."""
    out: list[JobStatus] = []
    for i, value in enumerate(values):
        status = _STATUS_FROM_PROTO.get(value)  # type: ignore[call-overload]
        if status is None:
            raise InvalidArgumentError(FieldViolation(f"{field}[{i}]", "must be QUEUED, RUNNING, DONE or FAILED"))
        out.append(status)
    return out


def job_to_proto(job: ExtractionJob) -> writeback_pb2.ExtractionJob:
    """The job as ExtractionJob (its stored result's operations and memory ids)."""
    operations = [
        writeback_pb2.ExtractionOperation(
            operation=str(op.get("operation") or ""),
            fact=str(op.get("fact") or ""),
            memory=str(op.get("memory") or ""),
            memory_id=str(op.get("memory_id") or ""),
            outcome=str(op.get("outcome") or ""),
        )
        for op in job.result.get("operations", [])
        if isinstance(op, dict)
    ]
    return writeback_pb2.ExtractionJob(
        id=job.id,
        status=_STATUS[job.status],
        attempt_count=job.attempts,
        error=job.error,
        scope=memory_pb2.Scope(user_id=job.scope.user_id, agent_id=job.scope.agent_id, session_id=job.scope.session_id),
        message_ids=list(job.message_ids),
        memory_ids=[str(i) for i in job.result.get("memory_ids", [])],
        operations=operations,
        model=str(job.result.get("model") or ""),
        create_time=timestamp(job.created_at),
        update_time=timestamp(job.updated_at),
        cost=_cost(job.result.get("cost")),
        failed_attempts=[
            writeback_pb2.ExtractionAttemptFailure(attempt=f.attempt, error=f.error, fail_time=timestamp(f.time))
            for f in job.failed_attempts
        ],
    )


def _cost(cost: object) -> writeback_pb2.ExtractionCost | None:
    if not isinstance(cost, dict):
        return None
    return writeback_pb2.ExtractionCost(
        llm_call_count=int(cost.get("llm_calls", 0)),
        prompt_tokens=int(cost.get("prompt_tokens", 0)),
        completion_tokens=int(cost.get("completion_tokens", 0)),
        queue_duration=duration(float(cost.get("queue_seconds", 0.0))),
        llm_duration=duration(float(cost.get("llm_seconds", 0.0))),
        embedding_duration=duration(float(cost.get("embedding_seconds", 0.0))),
        database_duration=duration(float(cost.get("database_seconds", 0.0))),
    )
