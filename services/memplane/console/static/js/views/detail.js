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
    ["scope", scopeText(m.scope)],
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

function eventItem(e) {
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
  );
}

export function detailView(id) {
  const section = h("section", { class: "view-detail" }, h("h1", {}, "Memory"), state("loading", "Loading the memory…"));

  async function load(notice) {
    let reply;
    try {
      reply = await call("GET", `memories/${encodeURIComponent(id)}`);
    } catch (error) {
      const text = error.status === 404 ? "Memory not found (in this workspace)." : `Could not load the memory: ${error.message}`;
      replace(section, h("h1", {}, "Memory"), state("error", text), h("p", {}, h("a", { href: "#/memories" }, "Back to memories")));
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
            replace(section, h("h1", {}, "Memory"), state("ok", `Deleted memory ${memory.id}.`), h("p", {}, h("a", { href: "#/memories" }, "Back to memories")));
          } catch (error) {
            confirmDelete.disabled = false;
            replace(deleteStatus, state("error", `Not deleted: ${error.message}`));
          }
        },
      },
      "Really delete",
    );
    const del = h("button", { type: "button", class: "danger", onclick: () => { confirmDelete.hidden = false; } }, "Delete…");
    replace(
      section,
      h("h1", {}, memory.name || "Memory"),
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
          h("div", { class: "delete" }, del, confirmDelete, deleteStatus),
        ),
        h(
          "div",
          {},
          h("h2", {}, "History"),
          events.length ? h("ol", { class: "history" }, events.map(eventItem)) : state("empty", "No recorded events."),
        ),
      ),
    );
  }

  load();
  return section;
}
