// One memory: content, metadata, validity, provenance; its history as a diff of each
// event (before -> after, actor, time); edit with the version check; delete.

import { call } from "../api.js";
import { wordDiff } from "../diff.js";
import { h, replace, scopeText, state, when } from "../dom.js";

const COMPARED = ["name", "description", "type", "valid_from_time", "valid_to_time", "expire_time"];

function facts(m) {
  const rows = [
    ["id", m.id],
    ["type", m.type],
    ["scope", m.scope.session_id ? [scopeText(m.scope), " ", h("a", { href: `#/session/${encodeURIComponent(m.scope.session_id)}` }, "open the session")] : scopeText(m.scope)],
    ["name", m.name],
    ["description", m.description],
    ["version", String(m.version)],
    ["valid", `${when(m.valid_from_time) || "–"} → ${when(m.valid_to_time) || "now"}`],
    ["expires", when(m.expire_time) || "never"],
    ["provenance", m.provenance.session_id ? `session ${m.provenance.session_id}, messages ${m.provenance.message_ids.join(", ") || "–"}` : "–"],
    ["created", when(m.create_time)],
    ["updated", when(m.update_time)],
  ];
  return h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function eventItem(e, useText) {
  const before = e.before;
  const after = e.after;
  const changes = [];
  if (before && after) {
    if (before.content !== after.content) changes.push(h("div", { class: "diff" }, wordDiff(before.content, after.content)));
    for (const f of COMPARED) {
      if (before[f] !== after[f]) changes.push(h("div", { class: "field-change" }, `${f}: `, h("del", {}, before[f] || "–"), " → ", h("ins", {}, after[f] || "–")));
    }
    if (JSON.stringify(before.metadata) !== JSON.stringify(after.metadata)) {
      changes.push(h("div", { class: "field-change" }, "metadata: ", h("del", {}, JSON.stringify(before.metadata)), " → ", h("ins", {}, JSON.stringify(after.metadata))));
    }
  } else if (after) {
    changes.push(h("div", { class: "diff" }, h("ins", {}, after.content)));
  } else if (before) {
    changes.push(h("div", { class: "diff" }, h("del", {}, before.content)));
  }
  return h(
    "li",
    { class: `event event-${e.kind}` },
    h("header", {}, h("strong", {}, e.kind.toUpperCase()), ` by ${e.actor || "unknown"} at ${when(e.create_time)}`, before && after ? ` (v${before.version} → v${after.version})` : ""),
    changes.length ? changes : h("p", { class: "muted" }, "no change"),
    useText && before && after && before.content !== after.content
      ? h("button", { type: "button", class: "secondary", onclick: () => useText(before.content) }, "Edit from the text before this")
      : null,
  );
}

export function detailView(id) {
  const section = h("section", { class: "view-detail" }, h("h1", {}, "Memory"), state("loading", "Loading the memory…"));

  const backLink = () => h("p", {}, h("a", { href: "#/memories" }, "Back to memories"));

  // Not found: a memory deleted from this workspace still has its history (and can be
  // stored again); an id the workspace never had has none.
  async function showGone(notice) {
    let events = [];
    try {
      ({ events } = await call("GET", `memories/${encodeURIComponent(id)}/events`));
    } catch {
      events = [];
    }
    const deletion = events.filter((e) => e.kind === "delete" && e.before).pop();
    if (!deletion) {
      replace(section, h("h1", {}, "Memory"), state("error", "Memory not found (in this workspace)."), backLink());
      return;
    }
    const status = h("div", { class: "status" });
    const restore = h(
      "button",
      {
        type: "button",
        onclick: async () => {
          restore.disabled = true;
          try {
            const { memory } = await call("POST", `memories/${encodeURIComponent(id)}/restore`);
            location.hash = `#/memory/${encodeURIComponent(memory.id)}`;
          } catch (error) {
            restore.disabled = false;
            replace(status, state("error", `Not restored: ${error.message}`));
          }
        },
      },
      "Restore it",
    );
    replace(
      section,
      h("h1", {}, "Memory"),
      notice || null,
      state("error", `This memory was deleted at ${when(deletion.create_time)} by ${deletion.actor || "unknown"}.`),
      h("p", { class: "content card" }, deletion.before.content),
      h("div", { class: "delete" }, restore, status),
      h("h2", {}, "History"),
      h("ol", { class: "history" }, events.map((e) => eventItem(e))),
      backLink(),
    );
  }

  async function load(notice) {
    let reply;
    try {
      reply = await call("GET", `memories/${encodeURIComponent(id)}`);
    } catch (error) {
      if (error.status === 404) {
        await showGone(notice);
        return;
      }
      replace(section, h("h1", {}, "Memory"), state("error", `Could not load the memory: ${error.message}`), backLink());
      return;
    }
    render(reply, notice);
  }

  function render({ memory, events }, notice) {
    const editor = h("textarea", { name: "content", rows: 4, cols: 60 });
    editor.value = memory.content;
    const status = h("div", { class: "status" }, notice || null);
    const save = h("button", { type: "submit" }, "Save");
    const edit = h(
      "form",
      {
        class: "edit card",
        onsubmit: async (event) => {
          event.preventDefault();
          save.disabled = true;
          replace(status, state("loading", "Saving…"));
          try {
            await call("PATCH", `memories/${encodeURIComponent(memory.id)}`, { content: editor.value, expected_version: memory.version });
            await load(state("ok", "Saved."));
          } catch (error) {
            save.disabled = false;
            if (error.status === 409) {
              replace(
                status,
                h(
                  "div",
                  { class: "conflict", role: "alert" },
                  `Conflict: the memory changed since you opened it (stored version ${error.details.actual_version}, yours ${memory.version}). Your edit was not saved.`,
                  h("button", { type: "button", onclick: () => load() }, "Reload the stored version"),
                ),
              );
            } else {
              replace(status, state("error", `Not saved: ${error.message}`));
            }
          }
        },
      },
      h("h2", {}, `Edit (version ${memory.version})`),
      editor,
      save,
    );
    const deleteStatus = h("div", { class: "status" });
    const confirmDelete = h(
      "button",
      {
        type: "button",
        class: "danger",
        hidden: true,
        onclick: async () => {
          confirmDelete.disabled = true;
          try {
            await call("DELETE", `memories/${encodeURIComponent(memory.id)}?expected_version=${memory.version}`);
            await showGone(state("ok", `Deleted memory ${memory.id}.`));
          } catch (error) {
            confirmDelete.disabled = false;
            replace(deleteStatus, state("error", `Not deleted: ${error.message}`));
          }
        },
      },
      "Really delete",
    );
    const del = h("button", { type: "button", class: "danger", onclick: () => { confirmDelete.hidden = false; } }, "Delete…");
    const superseded = memory.valid_to_time && new Date(memory.valid_to_time) <= new Date();
    const reopen = superseded
      ? h(
          "button",
          {
            type: "button",
            onclick: async () => {
              reopen.disabled = true;
              try {
                await call("PATCH", `memories/${encodeURIComponent(memory.id)}`, { reopen: true, expected_version: memory.version });
                await load(state("ok", "It is current again."));
              } catch (error) {
                reopen.disabled = false;
                replace(deleteStatus, state("error", error.status === 409 ? `Conflict: it changed since you opened it (stored version ${error.details.actual_version}); reload.` : `Not changed: ${error.message}`));
              }
            },
          },
          "Make it current again",
        )
      : null;
    replace(
      section,
      h("h1", {}, memory.name || "Memory"),
      superseded ? state("empty", `Superseded since ${when(memory.valid_to_time)}: searches leave it out unless asked to include superseded memories.`) : null,
      h("p", { class: "content card" }, memory.content),
      h(
        "div",
        { class: "columns" },
        h(
          "div",
          {},
          facts(memory),
          h("h2", {}, "Metadata"),
          h("pre", { class: "metadata" }, JSON.stringify(memory.metadata, null, 2)),
          edit,
          status,
          h("div", { class: "delete" }, reopen, del, confirmDelete, deleteStatus),
        ),
        h(
          "div",
          {},
          h("h2", {}, "History"),
          events.length
            ? h("ol", { class: "history" }, events.map((e) => eventItem(e, (text) => { editor.value = text; editor.focus(); })))
            : state("empty", "No recorded events."),
        ),
      ),
    );
  }

  load();
  return section;
}
