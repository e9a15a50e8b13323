"""The Markdown view of a workspace, in AgentScope's Agentic Memory layout:
`Memory/MEMORY.md` (an index, one line per file), one file per memory with frontmatter,
and a daily journal of episodic memories. `render_view` builds it (pure); `write_view`
puts it into a sandbox."""

from memplane.mdview.render import MEMORY_DIR, View, render_view
from memplane.mdview.write import WriteReport, write_view

__all__ = ["MEMORY_DIR", "View", "WriteReport", "render_view", "write_view"]
