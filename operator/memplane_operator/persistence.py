"""The operator's kopf settings (`configure`), and where kopf keeps its state of an object.

- The progress of the reconcile's steps (kopf's sub-handlers) is kept in the status,
  ``status.kopf.progress``, not in annotations. kopf writes an object's metadata and its
  status subresource in two requests, metadata first: a progress kept in annotations could
  say a step was done while the conditions that step set were never written (a SIGKILL
  between the two requests; the restarted operator skipped the step, and the workspace read
  Ready=False Reconciling until the next resync). In the status, a step's record and its
  conditions are one write: both land, or neither does and the step runs again.
- Each record of the reconcile is stamped with the metadata.generation it was made for,
  and a record of another generation is not read (`GenerationalProgressStorage`): a spec
  changed while a step waits for its retry is reconciled at once and every step runs again
  for it — not when the old retry falls due, nor with the steps done for the old spec
  skipped. The stamp is taken off a record as it is read, so a record read and not changed
  is not written again: kopf writes back every record that differs from the one it read,
  and a cycle whose only write changes nothing (a handler still sleeping) was a patch that
  brought no watch event — kopf waits for that event instead of sleeping out the delay
  and touching the object, so a step waiting for its retry waited for the resync.
- The diff-base (the last handled spec) stays in annotations under ``kopf.memplane.io``:
  not "memplane.io", because kopf leaves the annotations under its own prefix out of the
  diff it reacts to, and memplane.io/rotate must be seen.
- Events: kopf's posting of log records is off; `memplane_operator.events` posts typed
  Events with reasons of its own, once per transition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

from memplane_operator.context import FINALIZER

KOPF_PREFIX = "kopf.memplane.io"
GENERATION = "generation"  # the key of a progress record that says which generation it is for


def _generation(body: Mapping[str, Any]) -> int:
    return int((body.get("metadata") or {}).get("generation") or 0)


class GenerationalProgressStorage(kopf.StatusProgressStorage):
    """kopf's progress in ``status.kopf.progress``; the records of the handlers named in
    *generational* (and their sub-handlers) are read only for the generation they were made
    for. Records an older operator kept in annotations (``kopf.memplane.io/...``) are
    removed with the ones they stand for."""

    def __init__(self, *, generational: Iterable[str]) -> None:
        super().__init__(name="kopf")
        self.generational = tuple(generational)
        self.legacy = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)

    def _stamped(self, key: str) -> bool:
        return any(key == handler or key.startswith(f"{handler}/") for handler in self.generational)

    def fetch(self, *, key: kopf.HandlerId, body: kopf.Body) -> kopf.ProgressRecord | None:
        """The record of *key* as kopf wrote it (without our stamp), or None (none, or one
        made for another generation). kopf writes back every record that differs from the
        one it read: a stamp left in would make each cycle write the same records again."""
        record = super().fetch(key=key, body=body)
        if record is None or not self._stamped(key):
            return record
        fields = dict(cast(Mapping[str, Any], record))
        if fields.pop(GENERATION, None) != _generation(body):
            return None  # made for another spec: this one starts afresh
        return cast(kopf.ProgressRecord, fields)

    def store(self, *, key: kopf.HandlerId, record: kopf.ProgressRecord, body: kopf.Body, patch: kopf.Patch) -> None:
        if self._stamped(key):
            record = cast(kopf.ProgressRecord, {**record, GENERATION: _generation(body)})
        super().store(key=key, record=record, body=body, patch=patch)

    def purge(self, *, key: kopf.HandlerId, body: kopf.Body, patch: kopf.Patch) -> None:
        super().purge(key=key, body=body, patch=patch)
        self.legacy.purge(key=key, body=body, patch=patch)

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        return self.legacy.clear(essence=super().clear(essence=essence))


def configure(settings: kopf.OperatorSettings, *, generational: Iterable[str]) -> None:
    """Production kopf settings: our own finalizer, the progress in the status (records of
    the handlers *generational* per generation), the diff-base in annotations, no Events
    from log records, watch and request timeouts, how often an exiting timer is polled."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = GenerationalProgressStorage(generational=generational)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=KOPF_PREFIX)
    settings.posting.loggers = False  # kopf's "Logging" Events (typed after the log level): ours instead
    settings.posting.level = logging.INFO  # kopf.event / kopf.info check it: Normal Events pass
    settings.posting.reporting_component = "memplane-operator"
    settings.watching.server_timeout = 270  # re-list before the API server's own 5-minute watch timeout
    settings.watching.client_timeout = 300
    settings.networking.request_timeout = 30
    # A deletion waits for the object's resync timer to exit; kopf looks again only every
    # cancellation_polling seconds (60 by default), so a resync in flight when the object
    # was deleted held its finalizer a minute. A pass lasts a few RPCs: look every second.
    settings.background.cancellation_polling = 1.0
