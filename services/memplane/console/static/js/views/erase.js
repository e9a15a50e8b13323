// Erasure by scope (the right to be forgotten): name the scope, see how many memories it
// holds, erase exactly those, keep the receipt.

import { call } from "../api.js";
import { field, h, replace, scopeText, state, when } from "../dom.js";

export function eraseView() {
  const inputs = {
    user_id: h("input", { name: "user_id", size: 16 }),
    agent_id: h("input", { name: "agent_id", size: 16 }),
    session_id: h("input", { name: "session_id", size: 16 }),
  };
  const out = h("div", { class: "results" }, state("empty", "Name a user, agent or session, then preview."));
  const scope = () => Object.fromEntries(Object.entries(inputs).map(([k, el]) => [k, el.value.trim()]));

  async function preview() {
    const s = scope();
    replace(out, state("loading", "Counting…"));
    let count;
    try {
      ({ count } = await call("POST", "erasure/preview", s));
    } catch (error) {
      replace(out, state("error", `Cannot preview: ${error.message}`));
      return;
    }
    if (count === 0) {
      replace(out, state("empty", `${scopeText(s)} holds no memories.`));
      return;
    }
    const erase = h(
      "button",
      {
        type: "button",
        class: "danger",
        onclick: async () => {
          erase.disabled = true;
          try {
            const r = await call("POST", "erasure", { ...s, expected_count: count });
            replace(
              out,
              h(
                "div",
                { class: "receipt card", role: "status" },
                h("h2", {}, "Erasure receipt"),
                h("p", {}, `Scope: ${scopeText(r.scope)}`),
                h("p", {}, `Memories erased: ${r.deleted_count}`),
                h("p", {}, `Transcript messages erased: ${r.deleted_message_count}`),
                h("p", {}, `At: ${when(r.time)}`),
              ),
            );
          } catch (error) {
            erase.disabled = false;
            replace(out, state("error", `Not erased: ${error.message}`));
          }
        },
      },
      `Erase ${count} memories`,
    );
    replace(out, h("p", { class: "preview" }, `${scopeText(s)} holds ${count} memories (superseded and expired included).`), erase);
  }

  const form = h(
    "form",
    { class: "filters", onsubmit: (event) => { event.preventDefault(); preview(); } },
    field("user", inputs.user_id),
    field("agent", inputs.agent_id),
    field("session", inputs.session_id),
    h("button", { type: "submit" }, "Preview"),
  );
  return h("section", { class: "view-erase" }, h("h1", {}, "Erase a scope"), form, out);
}
