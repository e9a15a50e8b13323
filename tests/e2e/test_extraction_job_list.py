"""ListExtractionJobs: a workspace's extraction jobs newest first, filtered by state,
paged by token; another workspace's jobs are not listed; a bad page_size or token is
INVALID_ARGUMENT naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from memplane.client import AsyncMemplaneClient
from memplane.errors import InvalidArgumentError
from memplane.v1 import memory_pb2, writeback_pb2
from tests.e2e.test_extraction import answer
from tests.fake_llm import FakeLLM
from tests.fix_server import WorkspaceFactory

USER = memory_pb2.MESSAGE_ROLE_USER
DONE = writeback_pb2.EXTRACTION_JOB_STATUS_DONE
QUEUED = writeback_pb2.EXTRACTION_JOB_STATUS_QUEUED
FAILED = writeback_pb2.EXTRACTION_JOB_STATUS_FAILED


async def test_jobs_are_listed_newest_first_by_state_and_page(
    llm: FakeLLM, llm_client: AsyncMemplaneClient, llm_server: str, workspace_factory: WorkspaceFactory
) -> None:
    ids = []
    for i in range(3):
        llm.script(answer())  # nothing to extract: one call, the job done
        scope = memory_pb2.Scope(user_id=f"rita{i}", session_id=f"s{i}")
        said = [writeback_pb2.ConversationMessage(id=f"u{i}", role=USER, content=f"I live in city number {i}.")]
        reply = await llm_client.write_conversation(scope, said, extract=True, wait=True)
        assert reply.extraction_job.status == DONE, reply.extraction_job.error
        ids.append(reply.extraction_job.id)
    other = await workspace_factory()
    async with AsyncMemplaneClient(llm_server, other.key) as other_client:
        llm.script(answer())
        await other_client.write_conversation(
            memory_pb2.Scope(session_id="elsewhere"),
            [writeback_pb2.ConversationMessage(id="x", role=USER, content="I like tea.")],
            extract=True,
            wait=True,
        )
        assert len((await other_client.list_extraction_jobs()).jobs) == 1

    everything = await llm_client.list_extraction_jobs()
    assert [j.id for j in everything.jobs] == ids[::-1]
    assert everything.next_page_token == ""
    assert everything.jobs[0].scope.session_id == "s2"

    first = await llm_client.list_extraction_jobs(page_size=2)
    assert [j.id for j in first.jobs] == [ids[2], ids[1]]
    second = await llm_client.list_extraction_jobs(page_size=2, page_token=first.next_page_token)
    assert [j.id for j in second.jobs] == [ids[0]]
    assert second.next_page_token == ""

    assert len((await llm_client.list_extraction_jobs(statuses=[DONE])).jobs) == 3
    assert list((await llm_client.list_extraction_jobs(statuses=[QUEUED, FAILED])).jobs) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"page_size": 501}, "page_size"),
        ({"page_token": "not-a-token"}, "page_token"),
        ({"statuses": [writeback_pb2.EXTRACTION_JOB_STATUS_UNSPECIFIED]}, "statuses[0]"),
    ],
)
async def test_bad_requests_name_the_field(
    workspace_factory: WorkspaceFactory, kwargs: dict[str, Any], field: str
) -> None:
    ws = await workspace_factory()
    with pytest.raises(InvalidArgumentError) as raised:
        await ws.client.list_extraction_jobs(**kwargs)
    assert [v.field for v in raised.value.violations] == [field]
