"""`memplane import locomo` and `memplane eval locomo`.

Both talk to a running server (`memplane serve`) with the admin key (flag, env, or
data_dir/credentials.json, as `memplane workspace`). The dataset path is always given on
the command line: LoCoMo is CC BY-NC 4.0 and never shipped with memplane.

- import: each conversation into workspace "<prefix>-<sample id>" (e.g.
  "locomo-conv-26"), reused if it exists; idempotent, so a re-run duplicates nothing.
  The key minted for the import is revoked at the end (`memplane key create` makes one
  to query a workspace).
- eval: the same ingestion into fresh "eval-<run id>-<sample id>" workspaces, every
  question of categories 1-4 through SearchMemories per mode, evidence recall@k and
  nDCG@10 per category (see memplane.eval.metrics); workspaces deleted unless --keep.
  `--text-format peer` stores each turn instead as a peer harness does: one AddMemories
  memory "[<session date_time>] <speaker>: <text>" (no description), in fresh
  "eval-<run id>-peer-<sample id>" workspaces (see memplane.eval.ingest); `--text-format
  extract` writes the conversation format with extraction on. `--split` adds the rows of
  conversations 1-5 (tuning) and 6-10 (held out) apart (memplane.eval.runner.split_label).
  `--reuse --prefix P` evaluates an earlier import's workspaces instead; one missing (a
  mistyped prefix) is an error naming --prefix and the workspaces it looked for.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from memplane.cli.connect import add_connection_flags, admin_client, workspace_client
from memplane.cli.usage import UsageError
from memplane.client.aio import AsyncMemplaneClient
from memplane.domain.ranking import KNOB_HELP, TERMS, FusionMethod, knob_types
from memplane.eval.ingest import TEXT_FORMATS, ClientFactory, WorkspaceSet
from memplane.eval.locomo import Conversation, load_locomo
from memplane.eval.runner import (
    FUSIONS,
    SEARCH_MODES,
    EvalConfig,
    ingest_locomo,
    missing_workspaces,
    run_locomo_eval,
)
from memplane.server.retrieval.ranking import knob_bounds
from memplane.server.settings import MIN_WEIGHT, Settings


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _term(name: str, kind: type) -> Callable[[str], float]:
    """The argparse type of ranking knob *name*: a *kind* within the bounds the server's
    `RetrievalSettings` gives the knob (SearchMemories refuses the same values), and a
    positive weight at least MIN_WEIGHT; checked while parsing, before anything connects."""
    low, high = knob_bounds(name)

    def parse(text: str) -> float:
        try:
            value: float = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not low <= value <= high:  # NaN fails too
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, not {text}")
        if kind is float and 0.0 < value < MIN_WEIGHT:
            raise argparse.ArgumentTypeError(f"must be 0 or at least {MIN_WEIGHT:g} (a smaller weight underflows)")
        return value

    return parse


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in modes if m not in SEARCH_MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(SEARCH_MODES)} (comma-separated)")
    return modes


def _factory(ns: argparse.Namespace, settings: Settings) -> ClientFactory:
    """Workspace clients for the same target as the admin client, one per minted key."""

    def make(api_key: str) -> AsyncMemplaneClient:
        return workspace_client(argparse.Namespace(target=ns.target, api_key=api_key, ca_file=ns.ca_file), settings)

    return make


def _load(ns: argparse.Namespace) -> list[Conversation]:
    """The conversations of ns.path; raises `UsageError` naming the file when it cannot be
    read or is not LoCoMo data."""
    try:
        return load_locomo(ns.path, ns.conversations)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read LoCoMo data {ns.path}: {error}") from None


async def cmd_import_locomo(ns: argparse.Namespace, settings: Settings) -> int:
    """Import LoCoMo conversations into one workspace each; print a summary."""
    conversations = _load(ns)
    async with admin_client(ns, settings) as admin, WorkspaceSet(admin, _factory(ns, settings), delete=False) as spaces:
        stats = await ingest_locomo(
            spaces,
            conversations,
            prefix=ns.prefix,
            reuse=True,
            text_format=ns.text_format,
            concurrency=ns.concurrency,
            progress=not ns.no_progress,
        )
        names = [a.name for a in spaces.accesses]
    reused = f" ({stats.reused} reused; their sessions were replayed, nothing duplicated)" if stats.reused else ""
    print(f"workspaces: {stats.workspaces}{reused}: {', '.join(names)}")
    print(f"turns: {stats.turns} in {stats.seconds:.1f} s ({stats.turns_per_second:.1f} turns/s)")
    if names:
        print(f"query one with a key from: memplane key create {names[0]}")
    return 0


async def cmd_eval_locomo(ns: argparse.Namespace, settings: Settings) -> int:
    """Run the LoCoMo evidence-retrieval evaluation; print the table and baselines."""
    if ns.reuse and not ns.prefix:
        print("memplane: --reuse needs --prefix (the prefix the import used, e.g. locomo)", file=sys.stderr)
        return 2
    conversations = _load(ns)
    config = EvalConfig(
        modes=ns.modes,
        concurrency=ns.concurrency,
        keep=ns.keep,
        progress=not ns.no_progress,
        text_format=ns.text_format,
        split=ns.split,
        reuse=ns.reuse,
        ranking=_ranking(ns),
        **({"prefix": ns.prefix} if ns.prefix else {}),
    )
    async with admin_client(ns, settings) as admin:
        if ns.reuse:
            missing = await missing_workspaces(admin, conversations, prefix=ns.prefix, text_format=ns.text_format)
            if missing:
                _no_workspaces(ns, missing, len(conversations))
                return 1
        report = await run_locomo_eval(admin, _factory(ns, settings), conversations, config)
    print(report.format())
    return 0


def _ranking(ns: argparse.Namespace) -> dict[str, float]:
    """The RankingOptions fields the flags set (`AsyncMemplaneClient.search` options): each
    knob's flag given, --fusion other than "default"."""
    chosen = {name: getattr(ns, name) for name in knob_types() if getattr(ns, name) is not None}
    if chosen.get("fusion") == "default":
        del chosen["fusion"]
    if "fusion" in chosen:
        chosen["fusion"] = FUSIONS[chosen["fusion"]]
    return chosen


def _ranking_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per ranking knob (`memplane.domain.ranking.Ranking`): --fusion a choice, the
    others a number within the knob's bounds; unset (default) leaves it to the server."""
    for name, kind in knob_types().items():
        flag = f"--{name.replace('_', '-')}"
        if kind is FusionMethod:
            parser.add_argument(
                flag, choices=sorted(FUSIONS), default="default", help=f"{KNOB_HELP[name]} (default: the server's)"
            )
            continue
        low, high = knob_bounds(name)
        off = " (0 off)" if name in TERMS else ""
        parser.add_argument(
            flag,
            type=_term(name, kind),
            default=None,
            help=f"RankingOptions.{name}: {KNOB_HELP[name]}, {low:g}-{high:g}{off} (default: the server's)",
        )


def _no_workspaces(ns: argparse.Namespace, missing: Sequence[str], total: int) -> None:
    fmt = "" if ns.text_format == "conversation" else f" --text-format {ns.text_format}"
    print(
        f"memplane: --reuse: no workspace with --prefix {ns.prefix}{fmt} for {len(missing)} of {total} "
        f"conversations: looked for {', '.join(missing)}; nothing was created. Check --prefix, or import "
        f"them first: memplane import locomo {ns.path} --prefix {ns.prefix}{fmt}",
        file=sys.stderr,
    )


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", type=Path, help="locomo10.json (github.com/snap-research/LoCoMo, CC BY-NC 4.0)")
    parser.add_argument("--conversations", type=_positive_int, default=None, help="only the first N (default all)")
    parser.add_argument("--concurrency", type=_positive_int, default=4, help="requests in flight (default 4)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_connection_flags(parser)


def add_parsers(sub: Any, imports: Any) -> None:
    """Register `eval locomo` on the top-level subparsers *sub* and `import locomo` on
    *imports* (the subparsers of `memplane import`)."""
    q = imports.add_parser("locomo", help="one workspace per LoCoMo conversation, every turn as an episodic memory")
    _common(q)
    q.add_argument("--prefix", default="locomo", help='workspace names are "<prefix>-<sample id>" (default locomo)')
    q.add_argument(
        "--text-format",
        choices=TEXT_FORMATS,
        default=TEXT_FORMATS[0],
        help='how turns are stored, as `eval locomo --text-format` (not "conversation": workspaces '
        '"<prefix>-<format>-<sample id>")',
    )
    q.set_defaults(func=cmd_import_locomo)

    p = sub.add_parser("eval", help="evaluate retrieval on a benchmark (admin key; needs a running server)")
    esub = p.add_subparsers(dest="dataset", required=True)
    q = esub.add_parser("locomo", help="LoCoMo evidence recall@k and nDCG@10 per category and search mode")
    _common(q)
    q.add_argument(
        "--modes",
        type=_modes,
        default=("hybrid", "vector", "lexical"),
        help="comma-separated search modes (default hybrid,vector,lexical)",
    )
    _ranking_flags(q)
    q.add_argument(
        "--text-format",
        choices=TEXT_FORMATS,
        default=TEXT_FORMATS[0],
        help="how turns are stored: conversation (default; WriteConversation, description "
        '"[8 May 2023] <speaker>", content the turn) or peer (AddMemories, one memory per turn '
        'with content "[1:56 pm on 8 May, 2023] <speaker>: <text>" and no description, as peer '
        'harnesses store them, in "eval-<run id>-peer-<sample id>" workspaces) or extract (as '
        "conversation, with WriteConversation extract and wait: the server's LLM, or its rules "
        'extractor without one, adds memories beside the turns; "eval-<run id>-extract-<sample id>")',
    )
    q.add_argument(
        "--split",
        action="store_true",
        help="also report conversations 1-5 (tuning) and 6-10 (held out) apart, as <mode>/tuning and "
        "<mode>/held-out rows: choose weights on the tuning half, read the held-out one",
    )
    q.add_argument("--keep", action="store_true", help="keep the eval-* workspaces (default: delete them)")
    q.add_argument(
        "--prefix",
        default=None,
        help='workspace name prefix (default "eval-<random run id>"); with --reuse, the --prefix of an earlier '
        "`memplane import locomo` (e.g. locomo)",
    )
    q.add_argument(
        "--reuse",
        action="store_true",
        help="evaluate the workspaces an earlier `memplane import locomo --prefix P [--text-format F]` made "
        "(needs --prefix; a missing one is an error naming the workspaces looked for, nothing created): "
        "sessions are replayed idempotently (nothing re-embedded) and the workspaces kept, "
        "so an ablation costs search passes, not re-imports",
    )
    q.set_defaults(func=cmd_eval_locomo)
