"""The pure parts of the operator's file sync (memplane_operator.sync.state): the interval
(workspace, class, operator default; "0s" off), what counts as activity, the condition's
message, how a pass's error reads, and the condition the reconcile carries over."""

from __future__ import annotations

import aiodocker
import pytest

from memplane.errors import (
    DeadlineExceededError,
    KeyRevokedError,
    NotFoundError,
    UnauthenticatedError,
    UnavailableError,
)
from memplane.filesync import SyncReport
from memplane.filesync.lock import SyncLockedError
from memplane.sandbox.errors import SandboxExecTimeoutError, SandboxNotFoundError
from memplane.sandbox.kubeexec import KubeExecError
from memplane_operator.backends import docker as backend_docker
from memplane_operator.backends import e2b as backend_e2b
from memplane_operator.backends import pod as backend_pod
from memplane_operator.conditions import (
    CREDENTIALS_READY,
    DATABASE_READY,
    READY,
    SANDBOX_READY,
    SANDBOX_SYNCED,
    Conditions,
)
from memplane_operator.settings import OperatorSettings
from memplane_operator.sync.passes import _moved_forward, stored_conditions
from memplane_operator.sync.state import MAX_PROBLEMS_SHOWN, SyncBook, failure, found_edits, interval_seconds, summary


@pytest.mark.parametrize(
    ("workspace", "class_spec", "default", "expected"),
    [
        ("", {}, 30.0, 30.0),  # neither says: the operator's default
        ("", {"syncInterval": "2m"}, 30.0, 120.0),  # the class's
        ("10s", {"syncInterval": "2m"}, 30.0, 10.0),  # the workspace's wins
        ("0s", {"syncInterval": "2m"}, 30.0, None),  # "0s": off
        ("", {"syncInterval": "0s"}, 30.0, None),
        ("1h", {"syncInterval": "0s"}, 30.0, 3600.0),  # a workspace may turn on what its class turned off
        ("", {}, 0.0, None),  # an operator default of 0: off unless set
    ],
)
def test_the_interval_is_the_workspaces_else_the_classs_else_the_operators(
    workspace: str, class_spec: dict[str, str], default: float, expected: float | None
) -> None:
    assert interval_seconds(workspace, class_spec, default) == expected


def test_an_interval_the_schema_would_refuse_raises() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        interval_seconds("soon", {}, 30.0)


def test_edits_taken_back_are_activity_and_the_syncs_own_writes_are_not() -> None:
    own = SyncReport(written=["Memory/MEMORY.md", "Memory/user_a.md"], removed=["Memory/old.md"])
    assert not found_edits(own, frozenset())
    for edited in (
        SyncReport(updated=["Memory/user_a.md"]),
        SyncReport(added=["Memory/new.md"]),
        SyncReport(deleted=["Memory/user_a.md"]),
        SyncReport(conflicts=["Memory/user_a.md"]),
    ):
        assert found_edits(edited, frozenset())


def test_a_newly_malformed_file_is_activity_and_one_still_malformed_is_not() -> None:
    bad = SyncReport(problems={"Memory/bad.md": "missing frontmatter"})
    assert found_edits(bad, frozenset())  # new since the last pass
    assert not found_edits(bad, frozenset({"Memory/bad.md"}))  # the same file, left as it was
    assert not found_edits(bad, None)  # the first pass of this process: it may predate it


def test_the_summary_counts_writes_and_edits_and_names_the_problems() -> None:
    report = SyncReport(
        updated=["Memory/a.md"],
        added=["Memory/b.md"],
        written=["Memory/MEMORY.md", "Memory/a.md", "Memory/b2.md"],
        removed=["Memory/gone.md"],
        problems={"Memory/bad.md": "missing frontmatter (a first line '---')"},
    )
    text = summary(report)
    assert text.startswith("3 files written, 1 removed; 2 edits taken back (1 updated, 1 added, 0 deleted")
    assert "1 files left as they are, listed in Memory/.memplane-errors.md" in text
    assert "Memory/bad.md: missing frontmatter" in text


def test_the_summary_names_a_bounded_number_of_problems() -> None:
    problems = {f"Memory/bad{i:02}.md": "no name" for i in range(MAX_PROBLEMS_SHOWN + 3)}
    text = summary(SyncReport(problems=problems))
    assert text.count(": no name") == MAX_PROBLEMS_SHOWN
    assert text.endswith("and 3 more")


@pytest.mark.parametrize(
    ("error", "adapter", "reason"),
    [
        (TimeoutError("the pass did not finish within 120 s"), backend_docker, "TimedOut"),
        (SyncLockedError("held by host 1 since 0"), backend_docker, "SyncLocked"),
        (UnavailableError("connection refused"), backend_docker, "ServiceUnavailable"),
        (DeadlineExceededError("deadline"), backend_docker, "ServiceUnavailable"),
        (UnauthenticatedError("bad key"), backend_docker, "KeyRejected"),
        (KeyRevokedError("revoked"), backend_docker, "KeyRejected"),  # not the adapter's FailedPrecondition
        (aiodocker.DockerError(500, {"message": "engine down"}), backend_docker, "BackendUnavailable"),
        (aiodocker.DockerError(404, {"message": "no such container"}), backend_docker, "BackendRefused"),
        (SandboxExecTimeoutError(["sh"], 60), backend_docker, "SandboxError"),  # not a service deadline
        (SandboxNotFoundError("tn-a"), backend_docker, "SandboxError"),
        (SandboxNotFoundError("tn-a"), backend_e2b, "BackendUnavailable"),  # e2b: made again at the next ensure
        (KubeExecError("HTTP 400: pod has no node"), backend_pod, "BackendUnavailable"),  # not the services'
        (NotFoundError("memory", "x"), backend_docker, "ServiceError"),
        (RuntimeError("surprise"), backend_docker, "SyncFailed"),
    ],
)
def test_a_failed_pass_reads_as_a_reason(error: BaseException, adapter: object, reason: str) -> None:
    got = failure(error, adapter)  # type: ignore[arg-type]
    assert got.reason == reason
    assert got.message


def test_the_reconcile_carries_the_sync_condition_last_written_and_ready_ignores_it() -> None:
    book = SyncBook()
    written = Conditions([], 3)
    written.set(SANDBOX_SYNCED, False, "ServiceUnavailable", "down", derive=False)
    assert written.get(READY) is None  # the sync does not derive Ready
    book.slot("uid-1").decided, book.slot("uid-1").condition = True, written.get(SANDBOX_SYNCED)

    older = Conditions([{"type": SANDBOX_SYNCED, "status": "True", "reason": "Synced", "lastTransitionTime": "t"}], 3)
    book.overlay("uid-1", older)
    assert older.get(SANDBOX_SYNCED) == written.get(SANDBOX_SYNCED)
    older.set(SANDBOX_READY, True, "Provisioned")
    assert older.is_true(READY) is False  # DatabaseReady and CredentialsReady missing, SandboxSynced not a part

    book.slot("uid-1").condition = None  # the sync removed it (no backed sandbox any more)
    book.overlay("uid-1", older)
    assert older.get(SANDBOX_SYNCED) is None
    untouched = Conditions([{"type": SANDBOX_SYNCED, "status": "True", "reason": "Synced"}], 1)
    book.overlay("uid-other", untouched)  # nothing decided for it in this process: left as read
    assert untouched.get(SANDBOX_SYNCED) is not None


def test_the_sync_reaches_the_services_where_agents_do_unless_told() -> None:
    base = {"admin_key": "k", "admin_target": "admin:1", "service_target": "svc:1"}
    assert OperatorSettings.model_validate(base).sync_targets() == ("svc:1", {})
    split = OperatorSettings.model_validate({**base, "service_targets": {"retrieval": "r:1"}})
    assert split.sync_targets() == ("svc:1", {"retrieval": "r:1"})
    told = OperatorSettings.model_validate({**base, "sandbox_sync_target": "sync:1"})
    assert told.sync_targets() == ("sync:1", {})


def test_status_times_only_move_forward() -> None:
    """A pass's times never take back a later one already recorded (a resume's
    lastActivityTime after the pass began), and a field not yet recorded is written."""
    recorded = {"lastActivityTime": "2026-12-05T20:42:15Z", "lastSyncTime": "2026-12-05T20:40:00Z"}
    fields = {"lastActivityTime": "2026-12-05T20:41:00Z", "lastSyncTime": "2026-12-05T20:43:00Z", "new": "x"}
    assert _moved_forward(recorded, fields) == {"lastSyncTime": "2026-12-05T20:43:00Z", "new": "x"}
    assert _moved_forward(recorded, {"lastActivityTime": "2026-12-05T20:42:15Z"}) == {}  # the same time: nothing


def test_the_sandbox_as_last_written_wins_over_an_older_body() -> None:
    book = SyncBook()
    read = {"className": "c", "ref": "r1", "state": "Running", "lastActivityTime": "2026-12-05T10:00:00Z",
            "lastSyncTime": "2026-12-05T10:00:05Z"}  # fmt: skip
    assert book.sandbox("uid-1", read) == read  # nothing written by this process: the body stands
    book.record("uid-1", {"state": "Suspended", "lastActivityTime": "2026-12-05T09:00:00Z", "claimName": None}, None)
    book.record("uid-1", {"className": "c"}, None)  # a later patch merges over the first
    assert book.sandbox("uid-1", read) == {**read, "state": "Suspended"}  # the sync's later activity kept
    newer = {**read, "lastActivityTime": "2026-12-05T08:00:00Z"}
    assert book.sandbox("uid-1", newer)["lastActivityTime"] == "2026-12-05T09:00:00Z"
    book.record("uid-1", {"ref": None}, None)  # a field written as null is gone
    assert "ref" not in book.sandbox("uid-1", read)
    book.record("uid-1", {"lastActivityTime": None}, None)  # the time too (class removed): the body's stays out
    assert "lastActivityTime" not in book.sandbox("uid-1", read)


def _decided(status: bool, reason: str) -> tuple[SyncBook, dict[str, object] | None]:
    """A book in which the sandbox step of uid-1 set SandboxReady (*status*, *reason*), and that condition."""
    book = SyncBook()
    decided = Conditions([], 1)
    decided.set(SANDBOX_READY, status, reason, "decided")
    book.record("uid-1", None, decided.get(SANDBOX_READY))
    return book, decided.get(SANDBOX_READY)


def _provisioned(generation: int) -> Conditions:
    """Every part of Ready True for *generation* (so Ready is True)."""
    parts = Conditions([], generation)
    for part in (DATABASE_READY, CREDENTIALS_READY, SANDBOX_READY):
        parts.set(part, True, "Provisioned")
    return parts


def test_the_sandbox_ready_last_set_is_put_back_and_ready_derived_again() -> None:
    book, decided = _decided(False, "BackendUnavailable")
    older = _provisioned(2)
    assert older.is_true(READY)
    book.overlay("uid-1", older)
    assert older.get(SANDBOX_READY) == decided
    assert not older.is_true(READY)
    untouched = Conditions([{"type": SANDBOX_READY, "status": "True", "reason": "Provisioned"}], 1)
    book.overlay("uid-1", untouched, ready=False)  # the status write: SandboxReady is the pass's own
    assert (untouched.get(SANDBOX_READY) or {})["reason"] == "Provisioned"


@pytest.mark.parametrize("reason", ["Suspended", "Deleting"])
def test_the_syncs_write_puts_back_sandbox_ready_but_leaves_ready_as_a_handler_set_it(reason: str) -> None:
    """A pass that ends after spec.suspend (or a stuck deletion) was stored: its status write
    keeps the SandboxReady this process last set, and the Ready=False the handler wrote.
    Re-deriving Ready there wrote "Reconciling" (suspend: the generation moved) or
    "Provisioned" (deletion) over it."""
    book, decided = _decided(True, "Suspended")
    listed = [c for c in _provisioned(1).as_list() if c["type"] != READY]
    generation = 2 if reason == "Suspended" else 1
    handler = Conditions([], generation)
    handler.set(READY, False, reason, "set by a handler")
    stored = {"metadata": {"generation": generation}, "status": {"conditions": [*listed, handler.get(READY)]}}
    written = stored_conditions(stored, book.slot("uid-1"))
    assert written.get(SANDBOX_READY) == decided
    ready = written.get(READY) or {}
    assert (ready.get("status"), ready.get("reason")) == ("False", reason)
