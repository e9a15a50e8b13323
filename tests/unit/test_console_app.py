"""The console's walls without a browser or a server: the ASGI app over a fake client
(httpx's ASGI transport), for the headers, the CSRF and origin checks, the cookie's
flags, the sign-in rate limit and the base path."""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from memplane.cli import entry
from memplane.client import AsyncMemplaneClient
from memplane.console import cli as console_cli
from memplane.console import inputs
from memplane.console.app import build_app, normalize_base_path
from memplane.console.cluster import ClusterAccess, MemoryWorkspaces
from memplane.console.ratelimit import RateLimiter
from memplane.console.security import CONTENT_SECURITY_POLICY
from memplane.console.sessions import SessionStore, TooManySessionsError
from memplane.errors import NotFoundError, QuotaExceededError, UnauthenticatedError
from memplane.v1 import compaction_pb2, filter_pb2, memory_pb2, retrieval_pb2

GOOD_KEY = "mp_k1_" + "a" * 43
OTHER_KEY = "mp_k2_" + "b" * 43


class FakeClient:
    """The calls the console makes, answering for GOOD_KEY only."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.closed = False

    async def list_memories(self, **_: Any) -> retrieval_pb2.ListMemoriesResponse:
        if self.key not in (GOOD_KEY, OTHER_KEY):
            raise UnauthenticatedError("unknown or revoked API key")
        return retrieval_pb2.ListMemoriesResponse(total_size=0)

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("bad input reached the server")

    async def get_memory(self, memory_id: str) -> Any:
        if memory_id == "boom":
            raise RuntimeError("an unexpected failure with a secret in it")
        raise NotFoundError("memory", memory_id)

    async def get_transcript(self, session_id: str, **_: Any) -> compaction_pb2.GetTranscriptResponse:
        TRANSCRIPTS_ASKED.append(session_id)
        return compaction_pb2.GetTranscriptResponse()

    async def close(self) -> None:
        self.closed = True


TRANSCRIPTS_ASKED: list[str] = []


def factory(key: str) -> AsyncMemplaneClient:
    return cast(AsyncMemplaneClient, FakeClient(key))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = build_app(factory, base_path="/memplane", limiter=RateLimiter(burst=3, rate_per_second=1.0))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as client:
        yield client


ORIGIN = {"origin": "http://console.test"}


async def sign_in(http: httpx.AsyncClient) -> str:
    reply = await http.post("/memplane/api/session", json={"api_key": GOOD_KEY}, headers=ORIGIN)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["csrf_token"])


async def test_headers_on_page_and_api(http: httpx.AsyncClient) -> None:
    for path in ("/memplane/", "/memplane/api/session", "/memplane/static/js/main.js"):
        reply = await http.get(path)
        assert reply.status_code == 200, path
        assert reply.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["x-frame-options"] == "DENY"
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    assert "object-src 'none'" in CONTENT_SECURITY_POLICY


async def test_base_path_redirects_and_page_links_are_relative(http: httpx.AsyncClient) -> None:
    for path in ("/memplane", "/"):
        reply = await http.get(path)
        assert reply.status_code == 308
        assert reply.headers["location"] == "/memplane/"
    page = (await http.get("/memplane/")).text
    assert 'src="static/js/main.js"' in page
    assert "<script>" not in page  # no inline script


async def test_cookie_flags_and_sign_out(http: httpx.AsyncClient) -> None:
    reply = await http.post("/memplane/api/session", json={"api_key": GOOD_KEY}, headers=ORIGIN)
    cookie = reply.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/memplane/" in cookie
    assert GOOD_KEY.lower() not in cookie
    csrf = reply.json()["csrf_token"]
    assert (await http.get("/memplane/api/session")).json()["signed_in"] is True
    out = await http.delete("/memplane/api/session", headers={**ORIGIN, "x-csrf-token": csrf})
    assert out.status_code == 200
    assert (await http.get("/memplane/api/session")).json() == {"signed_in": False}


async def test_state_changes_need_the_token_and_the_origin(http: httpx.AsyncClient) -> None:
    csrf = await sign_in(http)
    body = {"user_id": "u1", "expected_count": 0}
    missing = await http.post("/memplane/api/erasure", json=body, headers=ORIGIN)
    assert missing.status_code == 403
    assert missing.json()["error"]["code"] == "CSRF"
    wrong = await http.post("/memplane/api/erasure", json=body, headers={**ORIGIN, "x-csrf-token": csrf + "x"})
    assert wrong.status_code == 403
    foreign = await http.post(
        "/memplane/api/erasure", json=body, headers={"origin": "https://evil.example", "x-csrf-token": csrf}
    )
    assert foreign.status_code == 403
    assert foreign.json()["error"]["code"] == "CROSS_SITE"
    cross = await http.post(
        "/memplane/api/erasure", json=body, headers={"sec-fetch-site": "cross-site", "x-csrf-token": csrf}
    )
    assert cross.status_code == 403
    sign = await http.post("/memplane/api/session", json={"api_key": GOOD_KEY}, headers={"origin": "null"})
    assert sign.status_code == 403


async def test_signed_out_reads_are_401_and_not_found_is_404(http: httpx.AsyncClient) -> None:
    assert (await http.get("/memplane/api/memories")).status_code == 401
    await sign_in(http)
    reply = await http.get("/memplane/api/memories/00000000-0000-0000-0000-000000000001")
    assert reply.status_code == 404
    assert reply.json()["error"]["message"] == "not found"


async def test_bad_input_names_the_field(http: httpx.AsyncClient) -> None:
    await sign_in(http)
    reply = await http.get("/memplane/api/memories", params={"page_size": "5000"})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"].startswith("page_size:")
    for field, value in (
        ("type", "dream"),
        ("metadata", "novalue"),
        ("created_after", "May"),
        ("include_expired", "2"),
        ("order", "random"),
    ):
        reply = await http.get("/memplane/api/memories", params={field: value})
        assert reply.status_code == 400, field
        assert reply.json()["error"]["message"].startswith(f"{field}:")


async def test_search_checks_its_numbers(http: httpx.AsyncClient) -> None:
    csrf = await sign_in(http)
    headers = {**ORIGIN, "x-csrf-token": csrf}
    for field, value in (("vector_weight", 2), ("min_relevance", -0.1), ("top_k", 0), ("fusion", "best")):
        reply = await http.post("/memplane/api/search", json={"query": "tea", field: value}, headers=headers)
        assert reply.status_code == 400, field
        assert reply.json()["error"]["message"].startswith(f"{field}:")


async def test_sign_in_is_rate_limited(http: httpx.AsyncClient) -> None:
    bad = {"api_key": "mp_nope_" + "b" * 43}
    codes = [(await http.post("/memplane/api/session", json=bad, headers=ORIGIN)).status_code for _ in range(4)]
    assert codes == [401, 401, 401, 429]
    limited = await http.post("/memplane/api/session", json={"api_key": GOOD_KEY}, headers=ORIGIN)
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1


def test_rate_limiter_refills_with_time() -> None:
    clock = Clock()
    limiter = RateLimiter(burst=2, rate_per_second=0.5, clock=clock)
    assert [limiter.allow("a"), limiter.allow("a"), limiter.allow("a")] == [True, True, False]
    assert limiter.allow("b")
    assert limiter.retry_after("a") == pytest.approx(2.0)
    clock.now += 2.0
    assert limiter.allow("a")
    assert not limiter.allow("a")


async def test_idle_sessions_end_and_close_their_client() -> None:
    clock = Clock()
    store = SessionStore(factory, idle_seconds=60.0, clock=clock)
    client = factory(GOOD_KEY)
    session = await store.open(GOOD_KEY, client)
    assert session.key_id == "k1"
    assert await store.get(session.session_id) is session
    clock.now += 61.0
    assert await store.get(session.session_id) is None
    assert cast(FakeClient, client).closed


def test_base_path_is_checked() -> None:
    assert normalize_base_path("") == ""
    assert normalize_base_path("/memplane/") == "/memplane"
    assert normalize_base_path("a/b") == "/a/b"
    for bad in ("/a b", "/../x", "/a//b", '/"x'):
        with pytest.raises(ValueError, match="--base-path"):
            normalize_base_path(bad)


STATIC = Path(__file__).resolve().parents[2] / "services/memplane/console/static"


def test_the_page_never_parses_html_from_strings() -> None:
    """Memory text is set as text: no innerHTML and its kin in the page's modules, and no
    inline script or handler in its HTML (the CSP would refuse them anyway)."""
    for path in STATIC.rglob("*.js"):
        text = path.read_text(encoding="utf-8")
        for sink in (".innerHTML", ".outerHTML", ".insertAdjacentHTML", "document.write", "eval(", "new Function("):
            assert sink not in text, f"{path.name} uses {sink}"
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    assert "<script>" not in page
    assert re.search(r"\son[a-z]+\s*=", page) is None  # no onclick= and the like


def test_every_static_file_ships_in_the_wheel() -> None:
    """Each file of the page matches a package-data pattern of pyproject.toml."""
    config = tomllib.loads((STATIC.parents[3] / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["memplane"]
    package = STATIC.parent.parent
    for path in STATIC.rglob("*"):
        if path.is_file():
            relative = path.relative_to(package).as_posix()
            assert any(fnmatch.fnmatch(relative, p) and relative.count("/") == p.count("/") for p in patterns), relative


def test_the_command_reads_its_target_and_tls_from_flags_then_the_environment(tmp_path: Path) -> None:
    parser = console_cli.build_parser()
    environ = {"MEMPLANE_GRPC__PORT": "6000", "MEMPLANE_WRITEBACK_TARGET": "wb:7000"}
    ns = parser.parse_args([])
    assert console_cli._default_target(environ) == "127.0.0.1:6000"
    factory = console_cli.client_factory(ns, environ)
    assert callable(factory)
    with pytest.raises(console_cli.ConsoleUsageError, match="--ca-file"):
        console_cli.client_factory(parser.parse_args(["--ca-file", str(tmp_path / "missing.pem")]), {})


def test_the_kubeconfig_flag_is_read_at_start_and_a_bad_path_names_it(tmp_path: Path) -> None:
    parser = console_cli.build_parser()
    assert not console_cli.cluster_access(parser.parse_args([]), {}).enabled  # not in a Pod: no cluster
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    access = console_cli.cluster_access(
        parser.parse_args(["--kubeconfig", str(kubeconfig), "--kube-namespace", "team-a"]), {}
    )
    assert (access.kubeconfig, access.namespace, access.enabled) == (str(kubeconfig), "team-a", True)
    for bad in (tmp_path / "missing", tmp_path):  # absent; a directory
        with pytest.raises(console_cli.ConsoleUsageError, match="--kubeconfig"):
            console_cli.cluster_access(parser.parse_args(["--kubeconfig", str(bad)]), {})


async def test_an_unreachable_cluster_is_an_answer_for_the_admin_page_not_an_error(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"  # nothing listens on port 1
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    answer = await MemoryWorkspaces(ClusterAccess(kubeconfig=str(kubeconfig), namespace="team-a")).list()
    assert answer["reason"].startswith("the Kubernetes API is unreachable: "), answer
    assert (answer["available"], answer["namespace"], answer["items"]) == (False, "team-a", [])


def test_the_command_needs_only_the_console_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without uvicorn, `memplane console` says which extra to install (exit 1); it never
    loads the server's settings."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    assert entry.main(["console"]) == 1
    assert "pip install 'memplane[console]'" in capsys.readouterr().err


async def test_a_body_over_the_limit_is_refused_before_it_is_read(http: httpx.AsyncClient) -> None:
    """A Content-Length over 1 MiB is a 413 naming `body` before a byte is read (the
    sign-in needs no session); a chunked body stops being read just past the limit."""
    declared = await http.post(
        "/memplane/api/session",
        content=b'{"api_key": "x"}',
        headers={**ORIGIN, "content-type": "application/json", "content-length": str(400 * 1024 * 1024)},
    )
    assert declared.status_code == 413, declared.text
    assert declared.json()["error"]["message"].startswith("body:")
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"api_key": "'
        for _ in range(64):
            sent += 64 * 1024
            yield b"a" * (64 * 1024)

    chunked = await http.post("/memplane/api/session", content=chunks(), headers=ORIGIN)
    assert chunked.status_code == 413, chunked.text
    assert chunked.json()["error"]["message"].startswith("body:")
    assert "content-length" not in chunked.request.headers
    assert sent <= inputs.MAX_BODY_BYTES + 64 * 1024


def assert_headers(reply: httpx.Response) -> None:
    assert reply.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["x-frame-options"] == "DENY"
    assert reply.headers["cache-control"] == "no-store"


async def test_numbers_json_cannot_hold_are_400s_naming_the_field(http: httpx.AsyncClient) -> None:
    """NaN, Infinity, 1e400 and a 400-digit integer are 400s naming the body or the field
    (never an OverflowError's 500), with the security headers."""
    csrf = await sign_in(http)
    headers = {**ORIGIN, "x-csrf-token": csrf, "content-type": "application/json"}
    huge = "9" * 400
    cases = [
        ("/memplane/api/search", '{"query": "tea", "top_k": Infinity}', "body:"),
        ("/memplane/api/search", '{"query": "tea", "top_k": NaN}', "body:"),
        ("/memplane/api/search", '{"query": "tea", "top_k": 1e400}', "body:"),
        ("/memplane/api/search", f'{{"query": "tea", "top_k": {huge}}}', "top_k:"),
        ("/memplane/api/search", f'{{"query": "tea", "min_relevance": {huge}}}', "min_relevance:"),
        ("/memplane/api/session/preview?session_id=s1", '{"max_input_tokens": -Infinity}', "body:"),
        ("/memplane/api/session/preview?session_id=s1", f'{{"max_input_tokens": {huge}}}', "max_input_tokens:"),
        ("/memplane/api/search", "[" * 100_000 + "]" * 100_000, "body:"),
    ]
    for path, body, field in cases:
        reply = await http.post(path, content=body.encode(), headers=headers)
        assert reply.status_code == 400, (body[:60], reply.text)
        assert reply.json()["error"]["message"].startswith(field), body[:60]
        assert_headers(reply)
    patch = await http.patch(
        "/memplane/api/memories/m1", content=b'{"content": "x", "expected_version": Infinity}', headers=headers
    )
    assert patch.status_code == 400
    assert patch.json()["error"]["message"].startswith("body:")


async def test_times_and_metadata_out_of_range_are_400s_naming_the_param(http: httpx.AsyncClient) -> None:
    await sign_in(http)
    for field, value in (
        ("created_after", "0001-01-01T00:00:00+14:00"),
        ("created_before", "9999-12-31T23:59:59-14:00"),
        ("metadata", "k=" + "[" * 300 + "]" * 300),
        ("metadata", "k=" + "[" * 499 + "]" * 499),
        ("metadata", "k=" + "9" * 400),
    ):
        reply = await http.get("/memplane/api/memories", params={field: value})
        assert reply.status_code == 400, (field, value[:40], reply.text)
        assert reply.json()["error"]["message"].startswith(f"{field}:")
        assert_headers(reply)


async def test_an_api_key_grpc_metadata_cannot_carry_is_a_400_naming_it() -> None:
    """A key with non-ASCII or control characters never reaches the client (whose gRPC
    metadata would refuse it with a 500)."""
    made: list[str] = []
    app = build_app(lambda key: made.append(key) or factory(key), limiter=RateLimiter(burst=10, rate_per_second=1.0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as client:
        for key in ("mp_\u00e9_\u00fc", "mp_abc\nx: 1", "mp_\u0000", "mp_a b"):
            reply = await client.post("/api/session", json={"api_key": key}, headers=ORIGIN)
            assert reply.status_code == 400, (key, reply.text)
            assert reply.json()["error"]["message"].startswith("api_key:")
    assert made == []


async def test_an_unexpected_failure_is_a_json_500_with_the_security_headers() -> None:
    app = build_app(factory, limiter=RateLimiter(burst=3, rate_per_second=1.0))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as client:
        reply = await client.post("/api/session", json={"api_key": GOOD_KEY}, headers=ORIGIN)
        assert reply.status_code == 200
        failed = await client.get("/api/memories/boom")
    assert failed.status_code == 500
    assert failed.json() == {"error": {"code": "INTERNAL", "message": "internal error"}}
    assert "secret" not in failed.text
    assert "Traceback" not in failed.text
    assert_headers(failed)


async def test_one_key_signing_in_again_and_again_never_signs_another_out() -> None:
    """Key B's 20 sign-ins keep at most 8 sessions of B (its oldest closed, with their
    clients); key A's session stays signed in."""
    store = SessionStore(factory, max_sessions=10)
    app = build_app(factory, store=store, limiter=RateLimiter(burst=100, rate_per_second=1.0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as a:
        assert (await a.post("/api/session", json={"api_key": GOOD_KEY}, headers=ORIGIN)).status_code == 200
        for _ in range(20):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as b:
                assert (await b.post("/api/session", json={"api_key": OTHER_KEY}, headers=ORIGIN)).status_code == 200
        assert (await a.get("/api/session")).json()["signed_in"] is True
    assert len(store) == 9


async def test_a_full_store_refuses_sign_ins_instead_of_ending_sessions() -> None:
    clock = Clock()
    store = SessionStore(factory, max_sessions=2, max_per_key=8, idle_seconds=60.0, clock=clock)
    a = await store.open(GOOD_KEY, factory(GOOD_KEY))
    b_clients = [factory(OTHER_KEY) for _ in range(3)]
    first = await store.open(OTHER_KEY, b_clients[0])
    with pytest.raises(TooManySessionsError):
        await store.open(OTHER_KEY, b_clients[1])
    assert await store.get(a.session_id) is a
    assert await store.get(first.session_id) is first
    clock.now += 61.0  # both idle: they end first, and the sign-in succeeds
    await store.open(OTHER_KEY, b_clients[2])
    assert len(store) == 1
    assert cast(FakeClient, b_clients[0]).closed

    per_key = SessionStore(factory, max_per_key=2)
    clients = [factory(OTHER_KEY) for _ in range(3)]
    sessions = [await per_key.open(OTHER_KEY, c) for c in clients]
    assert await per_key.get(sessions[0].session_id) is None
    assert cast(FakeClient, clients[0]).closed
    assert len(per_key) == 2

    app = build_app(factory, store=SessionStore(factory, max_sessions=1), limiter=RateLimiter(burst=9))
    for key, status in ((GOOD_KEY, 200), (OTHER_KEY, 503)):  # two browsers
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as http:
            refused = await http.post("/api/session", json={"api_key": key}, headers=ORIGIN)
            assert refused.status_code == status
    assert refused.json()["error"]["message"] == "too many console sessions; try again later"


def test_console_calls_have_a_deadline_a_browser_can_wait_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each client the console makes gives its calls 15 s (not the SDK's 60 s), so a hung
    server is a 504 on the page within it; --timeout changes it and must be above 0."""
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(console_cli, "AsyncMemplaneClient", lambda *a, **kw: made.append(kw))
    parser = console_cli.build_parser()
    console_cli.client_factory(parser.parse_args([]), {})("mp_k1_x")
    console_cli.client_factory(parser.parse_args(["--timeout", "2.5"]), {})("mp_k1_x")
    assert [kw["timeout"] for kw in made] == [15.0, 2.5]
    for bad in ("0", "-1", "nan"):
        with pytest.raises(console_cli.ConsoleUsageError, match="--timeout"):
            console_cli.client_factory(parser.parse_args(["--timeout", bad]), {})


async def test_without_the_flag_no_proxy_header_is_trusted_not_even_from_loopback() -> None:
    """uvicorn trusts X-Forwarded-For from 127.0.0.1 by default (every `kubectl
    port-forward` user): the console does only for the addresses --forwarded-allow-ips names."""
    parser = console_cli.build_parser()
    seen: list[str] = []

    async def peer(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["client"][0])

    for args, expected in (([], "127.0.0.1"), (["--forwarded-allow-ips", "127.0.0.1"], "203.0.113.9")):
        config = console_cli.server_config(peer, parser.parse_args(args))
        assert config.proxy_headers is bool(args)
        config.load()
        scope = {
            "type": "http",
            "client": ("127.0.0.1", 40000),
            "scheme": "http",
            "headers": [(b"x-forwarded-for", b"203.0.113.9")],
        }
        await config.loaded_app(scope, None, None)
        assert seen[-1] == expected, args


class CountingClient(FakeClient):
    """Records each ListMemories filter."""

    filters: list[filter_pb2.MemoryFilter] = []  # noqa: RUF012 - one test's record, reset by it

    async def list_memories(self, **kwargs: Any) -> retrieval_pb2.ListMemoriesResponse:
        CountingClient.filters.append(kwargs.get("filter") or filter_pb2.MemoryFilter())
        return await super().list_memories(**kwargs)


class QuotaClient(FakeClient):
    """Answers GetDailyUsage with *days* empty days, or refuses it with the workspace's
    rate quota when *quota* is set."""

    quota = False

    async def get_daily_usage(self, days: int = 0) -> retrieval_pb2.GetDailyUsageResponse:
        if QuotaClient.quota:
            raise QuotaExceededError(
                "max_requests_per_second", "more than 2 calls per second", quota_id="max_requests_per_second", limit=2
            )
        return retrieval_pb2.GetDailyUsageResponse(days=[retrieval_pb2.DailyUsage() for _ in range(days)])


async def test_usage_is_one_daily_usage_call_and_a_rate_quota_is_a_clear_429() -> None:
    app = build_app(lambda key: cast(AsyncMemplaneClient, QuotaClient(key)), limiter=RateLimiter(burst=3))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as http:
        assert (await http.post("/api/session", json={"api_key": GOOD_KEY}, headers=ORIGIN)).status_code == 200
        reply = await http.get("/api/usage/daily", params={"days": 30})
        assert reply.status_code == 200, reply.text
        assert [set(d) for d in reply.json()["days"]] == [{"date", "memories_added", "searches"}] * 30
        bad = await http.get("/api/usage/daily", params={"days": 61})
        assert bad.status_code == 400
        assert "days" in bad.text
        QuotaClient.quota = True
        try:
            refused = await http.get("/api/usage/daily", params={"days": 30})
        finally:
            QuotaClient.quota = False
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["message"] == (
        "the workspace's request quota (2 per second) was reached; try again in a moment"
    )


async def test_export_follows_the_filters_on_screen() -> None:
    app = build_app(lambda key: cast(AsyncMemplaneClient, CountingClient(key)), limiter=RateLimiter(burst=3))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://console.test") as http:
        assert (await http.post("/api/session", json={"api_key": GOOD_KEY}, headers=ORIGIN)).status_code == 200
        CountingClient.filters = []
        params = {"user_id": "alice", "type": "user", "created_after": "2026-05-01", "metadata": "mood=calm"}
        reply = await http.get("/api/export", params=params)
    assert reply.status_code == 200, reply.text
    (flt,) = CountingClient.filters
    assert flt.user_id == "alice"
    assert list(flt.types) == [memory_pb2.MEMORY_TYPE_USER]
    assert flt.metadata.condition.key == "mood"
    assert flt.HasField("create_time_start")
    assert flt.include_superseded
    assert flt.include_expired


async def test_a_session_id_with_a_slash_or_dots_reaches_the_server_whole(http: httpx.AsyncClient) -> None:
    """The id is a query parameter: in the path, "team/alpha" would be split by the
    router and "." / ".." collapsed by the browser (the tester's 404s)."""
    await sign_in(http)
    TRANSCRIPTS_ASKED.clear()
    for session_id in ("team/alpha", ".", "..", "a b?#&"):
        reply = await http.get("/memplane/api/session/transcript", params={"session_id": session_id})
        assert reply.status_code == 200, reply.text
    assert TRANSCRIPTS_ASKED == ["team/alpha", ".", "..", "a b?#&"]
    missing = await http.get("/memplane/api/session/transcript")
    assert missing.status_code == 400
    assert "session_id" in missing.json()["error"]["message"]
