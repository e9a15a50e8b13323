// The admin key's view: workspaces with quotas and usage as gauges, and beside each the
// status conditions of its MemoryWorkspace when the console can read the cluster's; a
// workspace's keys (create: the key is shown once; revoke).

import { call, query } from "../api.js";
import { field, h, replace, state, when } from "../dom.js";

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let x = n;
  let u = 0;
  while (x >= 1024 && u < units.length - 1) {
    x /= 1024;
    u += 1;
  }
  return `${u ? x.toFixed(1) : x} ${units[u]}`;
}

function gauge(label, used, limit, show = String) {
  const text = limit ? `${show(used)} of ${show(limit)}` : `${show(used)} (no limit)`;
  return h(
    "div",
    { class: "gauge" },
    h("span", { class: "gauge-label" }, label),
    limit ? h("meter", { min: 0, max: limit, low: limit * 0.7, high: limit * 0.9, optimum: 0, value: Math.min(used, limit) }) : h("span", { class: "no-limit" }),
    h("span", { class: "gauge-text" }, text),
  );
}

function conditions(mw) {
  const gen = mw.observed_generation === mw.generation ? `generation ${mw.generation}, observed` : `generation ${mw.generation}, observed ${mw.observed_generation ?? "not yet"}`;
  const rows = mw.conditions.map((c) =>
    h(
      "tr",
      { class: `condition condition-${c.status === "True" ? "true" : c.status === "False" ? "false" : "unknown"}` },
      h("td", {}, c.type),
      h("td", {}, c.status),
      h("td", {}, c.reason),
      h("td", {}, c.message),
      h("td", {}, when(c.last_transition_time)),
    ),
  );
  return h(
    "div",
    { class: "memory-workspace", "data-name": `${mw.namespace}/${mw.name}` },
    h("p", {}, h("strong", {}, `MemoryWorkspace ${mw.namespace}/${mw.name}`), h("span", { class: "muted observed" }, ` ${mw.phase ? `${mw.phase} · ` : ""}${gen}`)),
    rows.length
      ? h("table", { class: "conditions" }, h("thead", {}, h("tr", {}, ["Condition", "Status", "Reason", "Message", "Since"].map((c) => h("th", {}, c)))), h("tbody", {}, rows))
      : state("empty", "No conditions yet: the operator has not reconciled it."),
  );
}

function workspaceCard(ws, cluster) {
  const q = ws.quotas;
  const u = ws.usage;
  const mine = cluster.available ? cluster.items.filter((mw) => (mw.workspace || mw.tenant_id) === ws.name) : [];
  return h(
    "article",
    { class: "card workspace" },
    h("header", {}, h("a", { href: `#/admin/ws/${encodeURIComponent(ws.name)}` }, h("strong", {}, ws.name)), h("span", { class: "muted" }, ` ${ws.embedding_model} (${ws.embedding_dimensions}-d), created ${when(ws.create_time)}`)),
    gauge("memories", u.memory_count, q.max_memories),
    gauge("content", u.content_bytes, q.max_bytes, bytes),
    gauge("embedding tokens today", u.embedding_tokens_today, q.max_embedding_tokens_per_day),
    h("p", { class: "muted" }, `${u.transcript_message_count} transcript messages · ${bytes(u.storage_bytes)} stored · ${q.max_requests_per_second ? `${q.max_requests_per_second} requests/s` : "no request-rate limit"}`),
    mine.map(conditions),
  );
}

function clusterSection(cluster, names) {
  if (!cluster.available) return h("p", { class: "muted cluster-note" }, `No MemoryWorkspace conditions: ${cluster.reason}.`);
  const others = cluster.items.filter((mw) => !names.has(mw.workspace || mw.tenant_id));
  const where = cluster.namespace ? `namespace ${cluster.namespace}` : "every namespace";
  return h(
    "section",
    { class: "cluster" },
    h("p", { class: "muted cluster-note" }, `${cluster.items.length} MemoryWorkspace(s) in ${where}; each is shown beside its workspace.`),
    others.length ? [h("h2", {}, "MemoryWorkspaces without a workspace on this page"), others.map((mw) => h("article", { class: "card" }, conditions(mw)))] : null,
  );
}

export function workspacesView() {
  const list = h("div", {}, state("loading", "Loading workspaces…"));
  const pager = h("div", { class: "pager" });
  const clusterPart = h("div", {});
  async function load(token) {
    replace(list, state("loading", "Loading workspaces…"));
    let reply;
    let cluster;
    try {
      [reply, cluster] = await Promise.all([
        call("GET", `admin/workspaces${query({ page_token: token })}`),
        call("GET", "admin/memoryworkspaces").catch((error) => ({ available: false, reason: error.message, items: [] })),
      ]);
    } catch (error) {
      replace(list, state("error", `Could not list workspaces: ${error.message}`));
      return;
    }
    replace(list, reply.workspaces.length ? reply.workspaces.map((ws) => workspaceCard(ws, cluster)) : state("empty", "No workspaces yet."));
    replace(clusterPart, clusterSection(cluster, new Set(reply.workspaces.map((ws) => ws.name))));
    replace(pager, reply.next_page_token ? h("button", { type: "button", onclick: () => load(reply.next_page_token) }, "Next") : null);
  }
  load("");
  return h("section", { class: "view-admin" }, h("h1", {}, "Workspaces"), list, pager, clusterPart);
}

export function keysView(name) {
  const list = h("div", {}, state("loading", "Loading keys…"));
  const created = h("div", {});
  const label = h("input", { name: "display_name", size: 30 });

  async function load() {
    let reply;
    try {
      reply = await call("GET", `admin/workspaces/${encodeURIComponent(name)}/keys`);
    } catch (error) {
      replace(list, state("error", error.status === 404 ? "Workspace not found." : `Could not list keys: ${error.message}`));
      return;
    }
    if (!reply.keys.length) {
      replace(list, state("empty", "This workspace has no keys."));
      return;
    }
    const rows = reply.keys.map((k) => {
      const status = h("span", {});
      const confirm = h(
        "button",
        {
          type: "button",
          class: "danger",
          hidden: true,
          onclick: async () => {
            confirm.disabled = true;
            try {
              await call("DELETE", `admin/keys/${encodeURIComponent(k.key_id)}`);
              await load();
            } catch (error) {
              confirm.disabled = false;
              replace(status, state("error", `Not revoked: ${error.message}`));
            }
          },
        },
        `Really revoke ${k.key_id}`,
      );
      const revoke = k.revoke_time ? null : h("button", { type: "button", class: "secondary", onclick: () => { confirm.hidden = false; } }, "Revoke…");
      return h(
        "tr",
        {},
        h("td", { class: "mono" }, k.key_id),
        h("td", {}, k.display_name),
        h("td", {}, when(k.create_time)),
        h("td", {}, k.revoke_time ? `revoked ${when(k.revoke_time)}` : "valid"),
        h("td", {}, revoke, confirm, status),
      );
    });
    replace(list, h("table", { class: "keys" }, h("thead", {}, h("tr", {}, ["Key id", "Label", "Created", "State", ""].map((c) => h("th", {}, c)))), h("tbody", {}, rows)));
  }

  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          const k = await call("POST", `admin/workspaces/${encodeURIComponent(name)}/keys`, { display_name: label.value });
          const secret = h("code", { class: "secret" }, k.api_key);
          replace(created, h("div", { class: "card created", role: "status" }, h("p", {}, `New key ${k.key_id}: copy it now, it is shown once.`), secret));
          label.value = "";
          await load();
        } catch (error) {
          replace(created, state("error", `No key created: ${error.message}`));
        }
      },
    },
    field("label", label),
    h("button", { type: "submit" }, "Create a key"),
  );
  load();
  return h("section", { class: "view-keys" }, h("h1", {}, `Workspace ${name}`), h("p", {}, h("a", { href: "#/admin" }, "All workspaces")), h("h2", {}, "API keys"), form, created, list);
}
