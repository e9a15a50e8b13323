"""The JSON backend-for-frontend, under ``<base path>/api/``.

    GET    api/session                 -> {signed_in, key_id, csrf_token}
    POST   api/session {api_key}       -> sign in: the session cookie, {key_id, csrf_token}
    DELETE api/session                 -> sign out
    GET    api/memories?user_id=&agent_id=&session_id=&type=&include_superseded=
                        &include_expired=&order=newest|oldest&page_size=&page_token=
                                       -> {memories, next_page_token, total_size}
    GET    api/memories/{id}           -> {memory, events}
    PATCH  api/memories/{id} {content?, reopen?, expected_version} -> {memory}; 409 on a conflict
    DELETE api/memories/{id}?expected_version= -> {id}
    GET    api/memories/{id}/events    -> {events} (also of a deleted memory)
    POST   api/memories/{id}/restore   -> {memory}: a deleted memory stored again (new id)
    GET    api/export?user_id=&agent_id=&session_id=&type=&created_after=&created_before=&metadata=&history=
                                       -> JSON lines, streamed
    GET    api/session/transcript?session_id=, POST api/session/preview?session_id= (`sessionview`)
    GET    api/jobs?status=&page_token= -> the write-back (extraction) jobs (`jobs`)
    GET    api/usage/daily?days=           -> memories added and searches per day (`usage`)
    api/admin/... with the admin key: workspaces, usage, keys (`admin`)
    GET    api/admin/memoryworkspaces  -> the cluster's MemoryWorkspaces and their conditions (`cluster`)
    POST   api/search {query, top_k, mode, fusion, vector_weight, min_relevance, context_turns, filters...}
                                       -> {hits, timing_ms, rerank_status, rerank_note}
    POST   api/erasure/preview {user_id, agent_id, session_id} -> {count}
    POST   api/erasure {user_id, agent_id, session_id, expected_count} -> the receipt

Every route but sign-in needs a session; every POST / PATCH / DELETE needs the session's
CSRF token in the ``X-CSRF-Token`` header and no foreign Origin (403 otherwise). Sign-in is
rate-limited per client address (429 with Retry-After).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from memplane import errors
from memplane.client import AsyncMemplaneClient
from memplane.client.restore import restore_deleted
from memplane.console import admin, export, inputs, jobs, jsonview, sessionview, usage
from memplane.console.cluster import MemoryWorkspaces
from memplane.console.errors import BadRequestError, RefusedError, error_response, from_memplane
from memplane.console.ratelimit import RateLimiter
from memplane.console.security import UNSAFE_METHODS, client_address, cross_site
from memplane.console.sessions import Session, SessionStore, tokens_match
from memplane.v1 import filter_pb2, memory_pb2, retrieval_pb2

COOKIE = "memplane_console"
CSRF_HEADER = "x-csrf-token"
MAX_PAGE_SIZE = 200
MAX_TOP_K = 100
ORDERS = {"newest": retrieval_pb2.MEMORY_ORDER_NEWEST_FIRST, "oldest": retrieval_pb2.MEMORY_ORDER_OLDEST_FIRST}

Handler = Callable[[Request, Session], Awaitable[Response]]


def _session_json(session: Session) -> dict[str, Any]:
    return {"signed_in": True, "key_id": session.key_id, "csrf_token": session.csrf_token, "admin": session.admin}


async def _check_key(client: AsyncMemplaneClient) -> bool:
    """Whether the client's key is the admin key (True) or a workspace's (False), by a
    one-item list of memories, else of workspaces. Raises `UnauthenticatedError` (or
    `PermissionDeniedError`) for a key that is neither."""
    try:
        await client.list_memories(page_size=1)
    except errors.PermissionDeniedError:  # the admin key: it owns no memories
        await client.list_workspaces(page_size=1)
        return True
    return False


class ConsoleApi:
    """The routes over *store* (sessions) and *limiter* (sign-in attempts). The cookie's
    Path is *cookie_path* (the base path, "/" at the root); it is Secure when
    *secure_cookie* is True or the request came over https. *cluster* lists the
    MemoryWorkspaces of the admin view."""

    def __init__(
        self,
        store: SessionStore,
        limiter: RateLimiter,
        *,
        cookie_path: str,
        secure_cookie: bool,
        cluster: MemoryWorkspaces,
    ) -> None:
        self._store = store
        self._cluster = cluster
        self._limiter = limiter
        self._cookie_path = cookie_path
        self._secure = secure_cookie

    def routes(self) -> list[Route]:
        """The API's routes, relative to the mount point (``/api``)."""
        return [
            Route("/session", self.session_state, methods=["GET"]),
            Route("/session", self.sign_in, methods=["POST"]),
            Route("/session", self._signed_in(self.sign_out), methods=["DELETE"]),
            Route("/memories", self._signed_in(self.list_memories), methods=["GET"]),
            Route("/memories/{memory_id}", self._signed_in(self.get_memory), methods=["GET"]),
            Route("/memories/{memory_id}", self._signed_in(self.update_memory), methods=["PATCH"]),
            Route("/memories/{memory_id}", self._signed_in(self.delete_memory), methods=["DELETE"]),
            Route("/memories/{memory_id}/events", self._signed_in(self.memory_events), methods=["GET"]),
            Route("/memories/{memory_id}/restore", self._signed_in(self.restore_memory), methods=["POST"]),
            Route("/export", self._signed_in(self.export), methods=["GET"]),
            Route("/jobs", self._signed_in(jobs.list_jobs), methods=["GET"]),
            Route("/usage/daily", self._signed_in(usage.daily), methods=["GET"]),
            Route("/session/transcript", self._signed_in(sessionview.transcript), methods=["GET"]),
            Route("/session/preview", self._signed_in(sessionview.preview), methods=["POST"]),
            Route("/search", self._signed_in(self.search), methods=["POST"]),
            Route("/erasure/preview", self._signed_in(self.erasure_preview), methods=["POST"]),
            Route("/erasure", self._signed_in(self.erase), methods=["POST"]),
            *[Route(path, self._signed_in(h, admin=True), methods=[m]) for path, h, m in admin.ROUTES],
            Route("/admin/memoryworkspaces", self._signed_in(self.memory_workspaces, admin=True), methods=["GET"]),
        ]

    async def memory_workspaces(self, request: Request, session: Session) -> Response:
        """The cluster's MemoryWorkspaces with their conditions, or why there are none
        (`memplane.console.cluster`): always a 200 for a signed-in admin."""
        return JSONResponse(await self._cluster.list())

    def _signed_in(self, handler: Handler, *, admin: bool = False) -> Callable[[Request], Awaitable[Response]]:
        """*handler* behind the checks: a live session (401), for a state-changing method
        the same origin and the CSRF token (403), the right kind of key — the admin key
        for *admin* routes, a workspace key for the others (403); failures as JSON errors."""

        async def endpoint(request: Request) -> Response:
            try:
                session = await self._session(request)
                if session.admin != admin:
                    which = "the admin key" if admin else "a workspace key (the admin key has no memories)"
                    raise RefusedError(403, "WRONG_KEY", f"this needs {which}")
            except RefusedError as refused:
                return refused.response()
            try:
                return await handler(request, session)
            except RefusedError as refused:
                return refused.response()
            except ValueError as error:  # an enum word (jsonview)
                return error_response(400, "BAD_REQUEST", str(error))
            except errors.UnauthenticatedError:
                await self._store.close(session.session_id)  # the key was revoked: sign out
                response = error_response(401, "SIGNED_OUT", "the key is no longer valid; sign in again")
                self._clear_cookie(response)
                return response
            except errors.MemplaneError as error:
                return from_memplane(error)

        return endpoint

    async def _session(self, request: Request) -> Session:
        """The request's live session, checked: raises `RefusedError` 403 for a
        cross-site or token-less state change, 401 without a session."""
        if request.method in UNSAFE_METHODS:
            reason = cross_site(request)
            if reason:
                raise RefusedError(403, "CROSS_SITE", f"refused: {reason}")
        session = await self._store.get(request.cookies.get(COOKIE))
        if session is None:
            raise RefusedError(401, "SIGNED_OUT", "not signed in")
        if request.method in UNSAFE_METHODS and not tokens_match(request.headers.get(CSRF_HEADER), session.csrf_token):
            raise RefusedError(403, "CSRF", "refused: missing or wrong CSRF token")
        return session

    # -- session ------------------------------------------------------------------
    async def session_state(self, request: Request) -> Response:
        """Whether this browser is signed in, as which key id, and its CSRF token."""
        session = await self._store.get(request.cookies.get(COOKIE))
        if session is None:
            return JSONResponse({"signed_in": False})
        return JSONResponse(_session_json(session))

    async def sign_in(self, request: Request) -> Response:
        """Check the key against the server (a one-memory list), then open a session."""
        try:
            key = await self._signing_in(request)
            client = self._store.client_for(key)
            try:
                is_admin = await _check_key(client)
            except BaseException:
                await client.close()
                raise
        except RefusedError as refused:
            return refused.response()
        except (errors.UnauthenticatedError, errors.PermissionDeniedError):
            return error_response(401, "UNAUTHENTICATED", "unknown or revoked API key")
        except errors.MemplaneError as error:
            return from_memplane(error)
        old = request.cookies.get(COOKIE)
        if old:
            await self._store.close(old)
        try:
            session = await self._store.open(key, client, admin=is_admin)
        except RefusedError as refused:  # the store is full
            await client.close()
            return refused.response()
        response = JSONResponse(_session_json(session))
        response.set_cookie(
            COOKIE,
            session.session_id,
            path=self._cookie_path,
            httponly=True,
            samesite="strict",
            secure=self._secure or request.url.scheme == "https",
        )
        return response

    async def _signing_in(self, request: Request) -> str:
        """The key a sign-in request carries, after the origin check and the rate limit.
        Raises `RefusedError`: 403 cross-site, 429 (Retry-After) past the limit, 400."""
        reason = cross_site(request)
        if reason:
            raise RefusedError(403, "CROSS_SITE", f"refused: {reason}")
        address = client_address(request)
        if not self._limiter.allow(address):
            wait = math.ceil(self._limiter.retry_after(address))
            raise RefusedError(
                429, "RATE_LIMITED", f"too many sign-in attempts; try again in {wait} s", retry_after_seconds=wait
            )
        key = inputs.text(await inputs.json_body(request), "api_key", max_chars=512).strip()
        if not key:
            raise BadRequestError("api_key: required")
        if not all(" " < c < "\x7f" for c in key):  # gRPC metadata carries printable ASCII only
            raise BadRequestError("api_key: printable ASCII only (no spaces, control or non-ASCII characters)")
        return key

    async def sign_out(self, request: Request, session: Session) -> Response:
        """End the session and clear the cookie."""
        await self._store.close(session.session_id)
        response = JSONResponse({"signed_in": False})
        self._clear_cookie(response)
        return response

    def _clear_cookie(self, response: Response) -> None:
        response.delete_cookie(COOKIE, path=self._cookie_path, httponly=True, samesite="strict")

    # -- memories -----------------------------------------------------------------
    async def list_memories(self, request: Request, session: Session) -> Response:
        """One page of the workspace's memories, `order` newest (the default) or oldest
        first, sorted by the server, with the total count. Another order is a 400 naming
        the field."""
        query = request.query_params
        reply = await session.client.list_memories(
            filter=inputs.memory_filter(query),
            page_size=inputs.integer(query, "page_size", default=25, low=1, high=MAX_PAGE_SIZE),
            page_token=inputs.text(query, "page_token", max_chars=4_096),
            order=inputs.choice(query, "order", ORDERS, "newest"),
        )
        return JSONResponse(
            {
                "memories": [jsonview.memory(m) for m in reply.memories],
                "next_page_token": reply.next_page_token,
                "total_size": reply.total_size,
            }
        )

    async def get_memory(self, request: Request, session: Session) -> Response:
        """A memory and its history, oldest event first; 404 outside the key's workspace."""
        memory_id = request.path_params["memory_id"]
        memory = await session.client.get_memory(memory_id)
        events = await session.client.list_memory_events(memory_id)
        return JSONResponse({"memory": jsonview.memory(memory), "events": [jsonview.event(e) for e in events]})

    async def update_memory(self, request: Request, session: Session) -> Response:
        """Replace the content (`content`) and/or make a superseded memory current again
        (`reopen`: its valid_to cleared), only if the memory is still at expected_version
        (409 with the stored version otherwise: nothing is overwritten)."""
        body = await inputs.json_body(request)
        reopen = inputs.flag(body, "reopen")
        fields = ["valid_to_time"] if reopen else []
        content = inputs.text(body, "content", max_chars=100_000)
        if "content" in body:
            if not content.strip():
                raise BadRequestError("content: must not be empty")
            fields.append("content")
        if not fields:
            raise BadRequestError("content: required (or reopen: true)")
        expected = inputs.integer(body, "expected_version", default=0, low=1, high=2**62)
        if expected == 0:
            raise BadRequestError("expected_version: required")
        memory = await session.client.update_memory(
            request.path_params["memory_id"],
            memory_pb2.MemoryInput(content=content),
            fields,
            expected_version=expected,
        )
        return JSONResponse({"memory": jsonview.memory(memory)})

    async def delete_memory(self, request: Request, session: Session) -> Response:
        """Delete one memory (at expected_version when given)."""
        expected = inputs.integer(request.query_params, "expected_version", default=0, low=0, high=2**62)
        deleted = await session.client.delete_memory(request.path_params["memory_id"], expected_version=expected)
        return JSONResponse({"id": deleted})

    async def memory_events(self, request: Request, session: Session) -> Response:
        """A memory's history, oldest first; for a deleted memory too (empty for an id the
        workspace never had)."""
        events = await session.client.list_memory_events(request.path_params["memory_id"])
        return JSONResponse({"events": [jsonview.event(e) for e in events]})

    async def restore_memory(self, request: Request, session: Session) -> Response:
        """Store a deleted memory again from its last DELETE event (as `memplane restore`);
        404 when its history holds none (never deleted, or erased by scope)."""
        memory = await restore_deleted(session.client, request.path_params["memory_id"])
        return JSONResponse({"memory": jsonview.memory(memory)})

    async def export(self, request: Request, session: Session) -> Response:
        """The memories the browse view's filters match (scope, type, creation dates,
        metadata; superseded and expired always included) as JSON lines in `memplane
        export jsonl`'s format, newest first, streamed page by page; with history=true
        each memory's events follow it."""
        query = request.query_params
        flt = inputs.memory_filter(query)
        lines = export.export_lines(session.client, flt, history=inputs.flag(query, "history"))
        first = await anext(lines)  # the header: a bad key fails here, as a JSON error
        return StreamingResponse(
            export.prepend(first, lines),
            media_type="application/x-ndjson",
            headers={"content-disposition": 'attachment; filename="memplane-export.jsonl"'},
        )

    # -- search -------------------------------------------------------------------
    async def search(self, request: Request, session: Session) -> Response:
        """Hybrid search with every hit's explanation and the search's timing."""
        body = await inputs.json_body(request)
        query = inputs.text(body, "query", max_chars=2_000).strip()
        if not query:
            raise BadRequestError("query: required")
        min_relevance = inputs.fraction(body, "min_relevance")
        vector_weight = inputs.fraction(body, "vector_weight")
        reply = await session.client.search(
            query,
            top_k=inputs.integer(body, "top_k", default=10, low=1, high=MAX_TOP_K),
            min_relevance=min_relevance,
            filter=inputs.memory_filter(body),
            mode=inputs.choice(body, "mode", inputs.MODES, "hybrid"),
            context_turns=inputs.integer(body, "context_turns", default=0, low=0, high=10),
            fusion=inputs.choice(body, "fusion", inputs.FUSIONS, ""),
            vector_weight=vector_weight or None,  # 0: the server's default for the fusion
        )
        return JSONResponse(jsonview.search_reply(reply))

    # -- erasure ------------------------------------------------------------------
    async def _count(self, session: Session, scope: memory_pb2.Scope) -> int:
        flt = filter_pb2.MemoryFilter(
            user_id=scope.user_id,
            agent_id=scope.agent_id,
            session_id=scope.session_id,
            include_superseded=True,
            include_expired=True,
        )
        return (await session.client.list_memories(filter=flt, page_size=1)).total_size

    @staticmethod
    def _erasure_scope(body: dict[str, Any]) -> memory_pb2.Scope:
        scope = inputs.scope(body)
        if not (scope.user_id or scope.agent_id or scope.session_id):
            raise BadRequestError("scope: name a user_id, agent_id or session_id (not the whole workspace)")
        return scope

    async def erasure_preview(self, request: Request, session: Session) -> Response:
        """How many memories (superseded and expired included) an erasure of the scope removes."""
        scope = self._erasure_scope(await inputs.json_body(request))
        return JSONResponse({"count": await self._count(session, scope)})

    async def erase(self, request: Request, session: Session) -> Response:
        """Erase the scope's memories and transcript, if the count is still the one the
        person saw (409 when it changed: preview again); the receipt says what went."""
        body = await inputs.json_body(request)
        scope = self._erasure_scope(body)
        expected = inputs.integer(body, "expected_count", default=-1, low=0, high=2**62)
        if expected < 0:
            raise BadRequestError("expected_count: required (the preview's count)")
        count = await self._count(session, scope)
        if count != expected:
            message = f"the scope now holds {count} memories, not {expected}: preview again"
            return error_response(409, "COUNT_CHANGED", message, count=count)
        reply = await session.client.delete_memories_by_scope(scope)
        scope_json = {f: getattr(scope, f) for f in inputs.SCOPE_FIELDS}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return JSONResponse(jsonview.erasure_receipt(reply, scope_json, now))
