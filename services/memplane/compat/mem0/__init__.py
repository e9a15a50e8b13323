"""mem0's API over memplane: change `from mem0 import Memory` to
`from memplane.compat.mem0 import Memory` (likewise `AsyncMemory`, `MemoryClient`,
`AsyncMemoryClient`). Method names, arguments and result dicts are mem0 2.2.1's
(`mem0/memory/main.py`, `mem0/client/main.py`); `run_id` is memplane's session_id.

    from memplane.compat.mem0 import Memory

    m = Memory()  # MEMPLANE_TARGET and MEMPLANE_API_KEY (a workspace key)
    m.add("I love sci-fi movies", user_id="alice")
    m.search("what movies does alice like?", filters={"user_id": "alice"})["results"]

Where memplane differs, the docstrings of `AsyncMemory`'s methods say so (the LLM that
mem0 runs in the client runs, if at all, in memplane's write-back service; `reset()`
needs a scope).
"""

from memplane.compat.mem0.errors import MemoryNotFoundError, ValidationError
from memplane.compat.mem0.memory import AsyncMemory
from memplane.compat.mem0.platform import AsyncMemoryClient, MemoryClient
from memplane.compat.mem0.sync import Memory

__all__ = ["AsyncMemory", "AsyncMemoryClient", "Memory", "MemoryClient", "MemoryNotFoundError", "ValidationError"]
