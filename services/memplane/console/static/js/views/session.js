// A session: its transcript (compacted messages marked), and "what the agent will see":
// PrepareContext over the transcript at a chosen context window, recording nothing.

import { call, query } from "../api.js";
import { field, h, num, replace, state, when } from "../dom.js";

function blockNode(b) {
  if (b.kind === "tool_use") return h("div", { class: "block tool-use" }, `→ ${b.name}(${b.input_json})`);
  if (b.kind === "tool_result") {
    return h("div", { class: "block tool-result" }, `${b.name ? `${b.name} ` : ""}⇐ `, b.output, b.truncated ? h("span", { class: "badge" }, "cut") : null);
  }
  return h("div", { class: "block" }, b.text);
}

function messageNode(m) {
  return h(
    "li",
    { class: `message role-${m.role}${m.compacted ? " compacted" : ""}` },
    h(
      "header",
      {},
      m.seq !== undefined ? h("span", { class: "muted" }, `#${m.seq} `) : null,
      h("strong", {}, m.role),
      m.name ? ` (${m.name})` : "",
      m.create_time ? h("span", { class: "muted" }, ` ${when(m.create_time)}`) : null,
      m.compacted ? h("span", { class: "badge" }, "compacted") : null,
    ),
    m.blocks.map(blockNode),
  );
}

function chooser() {
  const id = h("input", { name: "session_id", size: 30, required: true });
  return h(
    "section",
    { class: "view-session" },
    h("h1", {}, "Session"),
    h(
      "form",
      { class: "filters", onsubmit: (event) => { event.preventDefault(); location.hash = `#/session/${encodeURIComponent(id.value.trim())}`; } },
      field("session id", id),
      h("button", { type: "submit" }, "Open"),
    ),
    state("empty", "Name a session to read its transcript."),
  );
}

export function sessionView(sessionId) {
  if (!sessionId) return chooser();
  // The id goes in the query, not the path: a session id may hold "/" or be "." or "..",
  // which a URL path would split or collapse.
  const list = h("ol", { class: "transcript" });
  const transcriptState = h("div", {}, state("loading", "Loading the transcript…"));
  const more = h("div", { class: "pager" });
  const memories = h("div", {}, state("loading", "Loading the session's memories…"));

  async function loadPage(token) {
    let reply;
    try {
      reply = await call("GET", `session/transcript${query({ session_id: sessionId, page_token: token })}`);
    } catch (error) {
      replace(transcriptState, state("error", `Could not read the transcript: ${error.message}`));
      return;
    }
    replace(transcriptState);
    if (!token && !reply.messages.length) replace(transcriptState, state("empty", "This session has no transcript."));
    list.append(...reply.messages.map(messageNode));
    replace(more, reply.next_page_token ? h("button", { type: "button", onclick: () => loadPage(reply.next_page_token) }, "More") : null);
  }

  async function loadMemories() {
    try {
      const reply = await call("GET", `memories${query({ session_id: sessionId, page_size: 50, include_superseded: true })}`);
      replace(
        memories,
        reply.memories.length
          ? h("ul", { class: "session-memories" }, reply.memories.map((m) => h("li", {}, h("a", { href: `#/memory/${encodeURIComponent(m.id)}` }, m.type), " ", m.content)))
          : state("empty", "No memories carry this session."),
      );
    } catch (error) {
      replace(memories, state("error", `Could not list the memories: ${error.message}`));
    }
  }

  const windowInput = h("input", { name: "max_input_tokens", type: "number", min: 0, step: 1000, value: 8000 });
  const systemPrompt = h("input", { name: "system_prompt", size: 40 });
  const preview = h("div", {}, state("empty", "Choose a context window and preview."));
  const previewForm = h(
    "form",
    {
      class: "filters",
      onsubmit: async (event) => {
        event.preventDefault();
        replace(preview, state("loading", "Preparing the context…"));
        let r;
        try {
          r = await call("POST", `session/preview${query({ session_id: sessionId })}`, { max_input_tokens: Number(windowInput.value), system_prompt: systemPrompt.value });
        } catch (error) {
          replace(preview, state("error", `No preview: ${error.message}`));
          return;
        }
        if (!r.previewed_message_count) {
          replace(preview, state("empty", "Nothing to prepare: the transcript is empty."));
          return;
        }
        const s = r.split;
        replace(
          preview,
          h(
            "p",
            { class: "preview-facts" },
            `${r.previewed_message_count} messages, ${s.total_tokens} tokens against a threshold of ${s.threshold_tokens} (${s.encoding}): ` +
              (r.compacted
                ? `the oldest ${s.keep_from_index} were summarised (${r.summary_method}); ${r.messages.length} messages are kept (${s.kept_tokens} tokens).`
                : s.needs_compaction
                  ? `compaction was needed but failed (${r.failure || "no reason given"}): every message is kept.`
                  : "no compaction needed: every message is kept.") +
              (r.truncated_tool_results ? ` ${r.truncated_tool_results} tool outputs were cut.` : ""),
          ),
          r.summary ? [h("h3", {}, "Summary"), h("pre", { class: "summary" }, r.summary)] : null,
          h("h3", {}, "Messages the model gets"),
          h("ol", { class: "transcript" }, r.messages.map(messageNode)),
        );
      },
    },
    field("context window (tokens)", windowInput),
    field("system prompt", systemPrompt),
    h("button", { type: "submit" }, "Preview"),
  );

  loadPage("");
  loadMemories();
  return h(
    "section",
    { class: "view-session" },
    h("h1", {}, `Session ${sessionId}`),
    h(
      "div",
      { class: "columns" },
      h("div", {}, h("h2", {}, "Transcript"), transcriptState, list, more),
      h("div", {}, h("h2", {}, "What the agent will see"), previewForm, preview, h("h2", {}, "Memories of this session"), memories),
    ),
  );
}
