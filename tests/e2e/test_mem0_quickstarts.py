# ruff: noqa: E501 - the documented examples are kept as mem0 wrote them, long lines included
"""mem0's own documented examples, run against a real memplane server with only the import
changed (`from mem0 import ...` → `from memplane.compat.mem0 import ...`):

- the Basic Usage example of mem0ai 2.2.1's README (its PyPI description): a chat loop
  that searches the user's memories before each answer and adds the exchange after,
  with OpenAI's client pointed at a scripted OpenAI-compatible server on loopback;
- the Platform quickstart (docs.mem0.ai/platform/quickstart: `AsyncMemoryClient`,
  `MemoryClient`, the API key set in MEM0_API_KEY);
- the open-source Python quickstart (docs.mem0.ai/v0x/open-source/python-quickstart:
  add, get_all, get, search, update, history, delete, delete_all, reset).

Each snippet is kept as text and executed; the sync ones run in a thread because the
server under test runs on this test's event loop."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
from typing import Any

import pytest

from memplane.compat.mem0 import ValidationError
from tests.docs_text import fenced, read
from tests.fake_llm import FakeLLM
from tests.fix_server import TestWorkspace

# mem0ai 2.2.1 README, "Basic Usage" (only the mem0 import changed).
README_EXAMPLE = """
from openai import OpenAI
from memplane.compat.mem0 import Memory

openai_client = OpenAI()
memory = Memory()

def chat_with_memories(message: str, user_id: str = "default_user") -> str:
    # Retrieve relevant memories
    relevant_memories = memory.search(query=message, filters={"user_id": user_id}, top_k=3)
    memories_str = "\\n".join(f"- {entry['memory']}" for entry in relevant_memories["results"])

    # Generate Assistant response
    system_prompt = f"You are a helpful AI. Answer the question based on query and memories.\\nUser Memories:\\n{memories_str}"
    messages = [{"role": "system", "content": system_prompt}, {"role": "user", "content": message}]
    response = openai_client.chat.completions.create(model="gpt-5-mini", messages=messages)
    assistant_response = response.choices[0].message.content

    # Create new memories from the conversation
    messages.append({"role": "assistant", "content": assistant_response})
    memory.add(messages, user_id=user_id)

    return assistant_response

def main():
    print("Chat with AI (type 'exit' to quit)")
    while True:
        user_input = input("You: ").strip()
        if user_input.lower() == 'exit':
            print("Goodbye!")
            break
        print(f"AI: {chat_with_memories(user_input)}")

if __name__ == "__main__":
    main()
"""

# docs.mem0.ai/platform/quickstart, "3.1 Instantiate Async Client" (the key pasted in).
PLATFORM_ASYNC = """
import os
from memplane.compat.mem0 import AsyncMemoryClient

os.environ["MEM0_API_KEY"] = "{key}"

client = AsyncMemoryClient()

async def main():
    response = await client.add("I'm travelling to SF", user_id="john")
    print(response)

await main()
"""

# docs.mem0.ai/platform/quickstart, "3. Instantiate Client" and "4.1 Create Memories",
# then its search.
PLATFORM_SYNC = """
import os
from memplane.compat.mem0 import MemoryClient

os.environ["MEM0_API_KEY"] = "{key}"

client = MemoryClient()

messages = [
    {{"role": "user", "content": "Hi, I'm Alex. I'm a vegetarian and I'm allergic to nuts."}},
    {{"role": "assistant", "content": "Hello Alex! I've noted that you're a vegetarian and have a nut allergy. I'll keep this in mind for any food-related recommendations or discussions."}}
]
client.add(messages, user_id="alex", metadata={{"food": "vegan"}})

query = "What can I cook for dinner tonight?"
print(client.search(query, filters={{"user_id": "alex"}}))
"""

# docs.mem0.ai/v0x/open-source/python-quickstart, every call in order. The page's fixed
# id "892db2ae-..." is the id its own add printed; here it is that of a memory just added.
OSS_QUICKSTART = """
import os
from memplane.compat.mem0 import Memory

os.environ["OPENAI_API_KEY"] = "your-api-key"

m = Memory()

messages = [
    {"role": "user", "content": "I'm planning to watch a movie tonight. Any recommendations?"},
    {"role": "assistant", "content": "How about a thriller movies? They can be quite engaging."},
    {"role": "user", "content": "I'm not a big fan of thriller movies but I love sci-fi movies."},
    {"role": "assistant", "content": "Got it! I'll avoid thriller recommendations and suggest sci-fi movies in the future."}
]

# Store inferred memories (default behavior)
result = m.add(messages, user_id="alice", metadata={"category": "movie_recommendations"})

# Store memories with agent and run context
result = m.add(messages, user_id="alice", agent_id="movie-assistant", run_id="session-001", metadata={"category": "movie_recommendations"})

# Store raw messages without inference
result = m.add(messages, user_id="alice", metadata={"category": "movie_recommendations"}, infer=False)

# Get all memories
all_memories = m.get_all(user_id="alice")

memory_id = next(r["id"] for r in all_memories["results"] if r["memory"].startswith("I'm planning"))

# Get a single memory by ID
specific_memory = m.get(memory_id)

related_memories = m.search(query="What do you know about me?", user_id="alice")

result = m.update(memory_id=memory_id, data="I love India, it is my favorite country.")

history = m.history(memory_id=memory_id)

m.delete(memory_id=memory_id) # Delete a memory

m.delete_all(user_id="alice") # Delete all memories

m.reset() # Reset all memories
"""


def _run(source: str, namespace: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """Execute *source* as a module body in *namespace*; its globals and what it printed."""
    namespace = {"__name__": "mem0_example"} if namespace is None else namespace
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<mem0 docs>", "exec"), namespace)  # noqa: S102 - the documented example itself
    return namespace, out.getvalue()


async def _run_async(source: str) -> tuple[dict[str, Any], str]:
    """Execute *source* with top-level await, as the docs' notebooks do, on this loop."""
    namespace: dict[str, Any] = {"__name__": "mem0_example"}
    out = io.StringIO()
    code = compile(source, "<mem0 docs>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    with contextlib.redirect_stdout(out):
        await eval(code, namespace)  # noqa: S307 - the documented example itself
    return namespace, out.getvalue()


@pytest.fixture
def memplane_env(monkeypatch: pytest.MonkeyPatch, server: str, workspace: TestWorkspace) -> TestWorkspace:
    """MEMPLANE_TARGET and MEMPLANE_API_KEY of a fresh workspace (what `Memory()` reads)."""
    monkeypatch.setenv("MEMPLANE_TARGET", server)
    monkeypatch.setenv("MEMPLANE_API_KEY", workspace.key)
    monkeypatch.delenv("MEM0_API_KEY", raising=False)
    return workspace


async def test_the_readme_chat_loop_remembers_across_turns(
    memplane_env: TestWorkspace, llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    llm.script("Noted: sci-fi, no thrillers.", "Try Arrival.")

    def chat() -> list[str]:
        namespace, _ = _run(README_EXAMPLE)
        try:
            return [
                namespace["chat_with_memories"]("I love sci-fi movies and I can't stand thrillers.", user_id="alice"),
                namespace["chat_with_memories"]("Which movie should I watch tonight?", user_id="alice"),
            ]
        finally:
            namespace["memory"].close()

    answers = await asyncio.to_thread(chat)

    assert answers == ["Noted: sci-fi, no thrillers.", "Try Arrival."]
    first_prompt, second_prompt = (r["messages"][0]["content"] for r in llm.requests)
    assert first_prompt.endswith("User Memories:\n")  # nothing stored yet
    assert "- I love sci-fi movies and I can't stand thrillers." in second_prompt.splitlines()
    stored = await memplane_env.client.list_memories()
    # each add() of a conversation keeps its facts (without an LLM, the user's statements),
    # not its turns: no question, no assistant reply, no system prompt
    assert {m.content for m in stored.memories} == {"I love sci-fi movies and I can't stand thrillers."}
    assert {m.scope.user_id for m in stored.memories} == {"alice"}


async def test_the_platform_quickstart_async_client(server: str, workspace: TestWorkspace, monkeypatch) -> None:
    monkeypatch.setenv("MEMPLANE_TARGET", server)
    monkeypatch.delenv("MEMPLANE_API_KEY", raising=False)
    monkeypatch.setenv("MEM0_API_KEY", "placeholder")  # the snippet sets it; restored after
    namespace, printed = await _run_async(PLATFORM_ASYNC.format(key=workspace.key))
    await namespace["client"].close()

    (stored,) = (await workspace.client.list_memories()).memories
    assert stored.content == "I'm travelling to SF"
    assert stored.scope.user_id == "john"
    assert printed.strip() == str({"results": [{"id": stored.id, "memory": "I'm travelling to SF", "event": "ADD"}]})


async def test_the_platform_quickstart_sync_client(server: str, workspace: TestWorkspace, monkeypatch) -> None:
    monkeypatch.setenv("MEMPLANE_TARGET", server)
    monkeypatch.delenv("MEMPLANE_API_KEY", raising=False)
    monkeypatch.setenv("MEM0_API_KEY", "placeholder")

    def run() -> tuple[dict[str, Any], str]:
        namespace, printed = _run(PLATFORM_SYNC.format(key=workspace.key))
        namespace["client"].close()
        return namespace, printed

    _, printed = await asyncio.to_thread(run)

    # add() of a conversation (infer=True) keeps its facts, not its turns: without an LLM
    # the user's statement; the assistant's acknowledgement is no memory
    (stored,) = (await workspace.client.list_memories()).memories
    assert (stored.content, stored.scope.user_id) == ("I'm a vegetarian and I'm allergic to nuts.", "alex")
    assert stored.metadata["food"] == "vegan"
    results = ast.literal_eval(printed.strip())["results"]
    assert {r["memory"] for r in results} == {stored.content}
    assert {r["user_id"] for r in results} <= {"alex"}
    assert {r["metadata"]["food"] for r in results} <= {"vegan"}
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= s <= 1 for s in scores)


async def test_the_open_source_quickstart_runs_every_call(memplane_env: TestWorkspace) -> None:
    def run() -> dict[str, Any]:
        namespace: dict[str, Any] = {"__name__": "mem0_example"}
        try:
            _run(OSS_QUICKSTART, namespace)
        except ValidationError as refusal:  # the last line: memplane refuses reset() without a scope
            namespace["refusal"] = refusal
        namespace["m"].close()
        return namespace

    ns = await asyncio.to_thread(run)

    assert "refusal" in ns, "reset() without a scope was not refused"
    assert "reset() without a scope" in str(ns["refusal"])
    # 3 adds of 4 messages: the first two (infer=True of a conversation) keep the user's
    # statement "... but I love sci-fi movies." once each (another agent_id: another
    # reconciliation key), the third (infer=False) the 4 messages as they are
    assert len(ns["all_memories"]["results"]) == 6
    assert ns["specific_memory"]["id"] == ns["memory_id"]
    assert ns["specific_memory"]["memory"] == "I'm planning to watch a movie tonight. Any recommendations?"
    assert ns["specific_memory"]["metadata"] == {"category": "movie_recommendations"}
    assert ns["related_memories"]["results"]
    assert ns["result"] == {"message": "Memory updated successfully!"}
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in ns["history"]] == [
        ("ADD", None, "I'm planning to watch a movie tonight. Any recommendations?"),
        (
            "UPDATE",
            "I'm planning to watch a movie tonight. Any recommendations?",
            "I love India, it is my favorite country.",
        ),
    ]
    assert (await memplane_env.client.list_memories()).memories == []  # delete_all(user_id="alice")


async def test_the_readme_mem0_example_runs_as_written(memplane_env: TestWorkspace) -> None:
    """docs/integrations/mem0.md's snippet, extracted and run (the environment gives
    the target and key it leaves to `setdefault`)."""
    snippet = fenced(read("docs/integrations/mem0.md"), "python")[0]

    _, printed = await asyncio.to_thread(_run, snippet)

    (line,) = printed.splitlines()
    score, rest = line.split(" ", 1)
    assert 0 <= float(score) <= 1
    assert rest == "I'm a vegetarian and allergic to nuts {'topic': 'food'}"
