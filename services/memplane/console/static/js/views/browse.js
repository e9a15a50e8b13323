// Browse the workspace's memories, newest or oldest first (sorted by the server): scope,
// type, creation date and metadata (key=value) filters, superseded and expired ones on
// request, server-side pages.

import { call, query } from "../api.js";
import { field, h, replace, scopeText, state, when } from "../dom.js";

const TYPES = ["", "user", "feedback", "project", "reference", "procedural", "tool", "episodic"];
const PAGE_SIZE = 25;

function preview(text, max = 160) {
  const flat = text.split(/\s+/).join(" ");
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

export function browseView() {
  const inputs = {
    user_id: h("input", { name: "user_id", size: 14 }),
    agent_id: h("input", { name: "agent_id", size: 14 }),
    session_id: h("input", { name: "session_id", size: 14 }),
    type: h("select", { name: "type" }, TYPES.map((t) => h("option", { value: t }, t || "any type"))),
    created_after: h("input", { type: "date", name: "created_after" }),
    created_before: h("input", { type: "date", name: "created_before" }),
    metadata: h("input", { name: "metadata", size: 16, placeholder: "key=value" }),
    include_superseded: h("input", { type: "checkbox", name: "include_superseded" }),
    include_expired: h("input", { type: "checkbox", name: "include_expired" }),
    order: h("select", { name: "order" }, h("option", { value: "newest" }, "newest first"), h("option", { value: "oldest" }, "oldest first")),
  };
  const results = h("div", { class: "results" });
  const pager = h("div", { class: "pager" });
  const exportLink = h("a", { class: "export", href: "api/export", download: "memplane-export.jsonl" }, "Export (JSON lines)");
  const withHistory = h("input", { type: "checkbox", name: "history" });
  const exportHref = () => {
    // The filters on screen, but every memory they match: superseded and expired included.
    const p = params();
    const filters = {
      user_id: p.user_id,
      agent_id: p.agent_id,
      session_id: p.session_id,
      type: p.type,
      created_after: p.created_after,
      created_before: p.created_before,
      metadata: p.metadata,
      history: withHistory.checked,
    };
    exportLink.setAttribute("href", `api/export${query(filters)}`);
  };
  withHistory.addEventListener("change", exportHref);
  const tokens = [""]; // page tokens of the pages seen, for Previous
  let page = 0;

  function params() {
    const p = { page_size: PAGE_SIZE, page_token: tokens[page] };
    for (const [k, el] of Object.entries(inputs)) p[k] = el.type === "checkbox" ? el.checked : el.value.trim();
    return p;
  }

  let loads = 0; // only the latest load's reply is shown (an earlier one may arrive after it)
  async function load() {
    const mine = ++loads;
    exportHref();
    replace(results, state("loading", "Loading memories…"));
    replace(pager);
    let reply;
    try {
      reply = await call("GET", `memories${query(params())}`);
    } catch (error) {
      if (mine === loads) replace(results, state("error", `Could not list memories: ${error.message}`));
      return;
    }
    if (mine !== loads) return;
    if (!reply.memories.length) {
      replace(results, state("empty", page ? "No more memories." : "No memories match these filters."));
    } else {
      const rows = reply.memories.map((m) =>
        h(
          "tr",
          {},
          h("td", {}, h("a", { href: `#/memory/${encodeURIComponent(m.id)}`, class: "content" }, preview(m.content))),
          h("td", {}, m.type),
          h("td", {}, scopeText(m.scope)),
          h("td", { class: "num" }, String(m.version)),
          h("td", {}, when(m.create_time)),
          h("td", {}, when(m.update_time)),
        ),
      );
      replace(
        results,
        h("p", { class: "count" }, `${reply.total_size} ${reply.total_size === 1 ? "memory" : "memories"}`),
        h(
          "table",
          { class: "memories" },
          h("thead", {}, h("tr", {}, ["Content", "Type", "Scope", "Version", "Created", "Updated"].map((c) => h("th", {}, c)))),
          h("tbody", {}, rows),
        ),
      );
    }
    const previous = h("button", { type: "button", disabled: page === 0, onclick: () => { page -= 1; load(); } }, "Previous");
    const next = h(
      "button",
      {
        type: "button",
        disabled: !reply.next_page_token,
        onclick: () => {
          tokens[page + 1] = reply.next_page_token;
          page += 1;
          load();
        },
      },
      "Next",
    );
    replace(pager, previous, h("span", {}, `page ${page + 1}`), next);
  }

  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: (event) => {
        event.preventDefault();
        tokens.length = 1;
        page = 0;
        load();
      },
    },
    field("user", inputs.user_id),
    field("agent", inputs.agent_id),
    field("session", inputs.session_id),
    field("type", inputs.type),
    field("created from", inputs.created_after),
    field("created before", inputs.created_before),
    field("metadata", inputs.metadata),
    field("superseded", inputs.include_superseded),
    field("expired", inputs.include_expired),
    field("order", inputs.order),
    h("button", { type: "submit" }, "Filter"),
    exportLink,
    field("with history", withHistory),
  );
  inputs.order.addEventListener("change", () => {
    tokens.length = 1; // a page token holds its order: start again from the first page
    page = 0;
    load();
  });
  load();
  return h("section", { class: "view-browse" }, h("h1", {}, "Memories"), form, results, pager);
}
