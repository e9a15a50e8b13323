// The search playground: a query with its controls, and for each hit the score explained
// (fused score, relevance, each leg's score and rank, rerank, boosts) and the timing.

import { call } from "../api.js";
import { field, h, num, replace, scopeText, state } from "../dom.js";

function signal(name, s) {
  if (!s) return h("tr", {}, h("th", {}, name), h("td", { colspan: 3, class: "muted" }, "not retrieved by this leg"));
  return h("tr", {}, h("th", {}, name), h("td", {}, num(s.score)), h("td", {}, num(s.normalized_score)), h("td", {}, `#${s.rank}`));
}

function explanation(hit) {
  const boosts = Object.entries(hit.boosts).filter(([, v]) => v !== 0);
  return h(
    "table",
    { class: "explain" },
    h("thead", {}, h("tr", {}, h("th", {}, "signal"), h("th", {}, "score"), h("th", {}, "normalised"), h("th", {}, "rank"))),
    h(
      "tbody",
      {},
      signal("vector", hit.vector),
      signal("lexical", hit.lexical),
      hit.rerank ? signal("rerank", hit.rerank) : null,
      h("tr", {}, h("th", {}, "boosts"), h("td", { colspan: 3 }, boosts.length ? boosts.map(([k, v]) => `${k} +${num(v)}`).join(", ") : "none")),
      h(
        "tr",
        {},
        h("th", {}, "relevance from"),
        h("td", { colspan: 3 }, Object.entries(hit.relevance_signals).map(([k, v]) => `${k} ${num(v)}`).join(", ")),
      ),
    ),
  );
}

function hitCard(hit, index) {
  const m = hit.memory;
  return h(
    "article",
    { class: "hit card" },
    h(
      "header",
      {},
      h("span", { class: "rank" }, `#${index + 1}`),
      h("span", { class: "score" }, `fused score ${num(hit.score)}`),
      h("span", { class: "relevance" }, `relevance ${num(hit.relevance, 2)}`),
      h("a", { href: `#/memory/${encodeURIComponent(m.id)}` }, "open"),
    ),
    h("p", { class: "content" }, m.content),
    h("p", { class: "muted" }, `${m.type} · ${scopeText(m.scope)} · version ${m.version}`),
    explanation(hit),
    hit.context.length
      ? [
          h("p", { class: "muted" }, "Context turns around it in its session:"),
          h("ol", { class: "context" }, hit.context.map((t) => h("li", { value: t.offset }, `${t.name ? `${t.name}: ` : ""}${t.content}`))),
        ]
      : null,
  );
}

export function searchView() {
  const q = h("input", { name: "query", size: 50, required: true, placeholder: "what does the user drink?" });
  const topK = h("input", { name: "top_k", type: "number", min: 1, max: 100, value: 10 });
  const mode = h("select", { name: "mode" }, ["hybrid", "vector", "lexical"].map((m) => h("option", { value: m }, m)));
  const fusion = h(
    "select",
    { name: "fusion" },
    [["", "server default"], ["rrf", "rrf"], ["weighted", "weighted"], ["dbsf", "dbsf"], ["zscore", "zscore"]].map(([v, t]) =>
      h("option", { value: v }, t),
    ),
  );
  const vectorWeight = h("input", { name: "vector_weight", type: "number", min: 0, max: 1, step: 0.05, value: 0, title: "0: the server's default" });
  const minRelevance = h("input", { name: "min_relevance", type: "number", min: 0, max: 1, step: 0.05, value: 0 });
  const userId = h("input", { name: "user_id", size: 10 });
  const agentId = h("input", { name: "agent_id", size: 10 });
  const sessionId = h("input", { name: "session_id", size: 10 });
  const type = h("select", { name: "type" }, ["", "user", "feedback", "project", "reference", "procedural", "tool", "episodic"].map((t) => h("option", { value: t }, t || "any type")));
  const contextTurns = h("input", { name: "context_turns", type: "number", min: 0, max: 10, value: 0 });
  const results = h("div", { class: "results" }, state("empty", "Type a query to search the workspace."));
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: async (event) => {
        event.preventDefault();
        replace(results, state("loading", "Searching…"));
        let reply;
        try {
          reply = await call("POST", "search", {
            query: q.value,
            top_k: Number(topK.value),
            mode: mode.value,
            fusion: fusion.value,
            vector_weight: Number(vectorWeight.value),
            min_relevance: Number(minRelevance.value),
            user_id: userId.value.trim(),
            agent_id: agentId.value.trim(),
            session_id: sessionId.value.trim(),
            type: type.value,
            context_turns: Number(contextTurns.value),
          });
        } catch (error) {
          replace(results, state("error", `Search failed: ${error.message}`));
          return;
        }
        const t = reply.timing_ms;
        const timing = h(
          "p",
          { class: "timing" },
          `${reply.hits.length} hits in ${num(t.total, 1)} ms (embedding ${num(t.embedding, 1)} ms, database ${num(t.database, 1)} ms` +
            `${t.rerank ? `, rerank ${num(t.rerank, 1)} ms` : ""}); rerank: ${reply.rerank_status}${reply.rerank_note ? ` (${reply.rerank_note})` : ""}`,
        );
        replace(results, timing, reply.hits.length ? reply.hits.map(hitCard) : state("empty", "Nothing matched."));
      },
    },
    field("query", q),
    field("top k", topK),
    field("mode", mode),
    field("fusion", fusion),
    field("vector weight", vectorWeight),
    field("min relevance", minRelevance),
    field("user", userId),
    field("agent", agentId),
    field("session", sessionId),
    field("type", type),
    field("context turns", contextTurns),
    h("button", { type: "submit" }, "Search"),
  );
  return h("section", { class: "view-search" }, h("h1", {}, "Search playground"), form, results);
}
