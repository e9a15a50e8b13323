// Write-back jobs: the workspace's extraction jobs, newest first, by state — queued,
// running, failed with the reason of each attempt, done with what they stored.

import { call, query } from "../api.js";
import { field, h, replace, scopeText, state, when } from "../dom.js";

const STATES = [
  ["", "every state"],
  ["pending", "pending or failed"],
  ["queued", "queued"],
  ["running", "running"],
  ["failed", "failed"],
  ["done", "done"],
];

function jobCard(j) {
  return h(
    "article",
    { class: `card job job-${j.status}` },
    h(
      "header",
      {},
      h("strong", { class: "job-status" }, j.status),
      ` ${scopeText(j.scope)} · ${j.message_ids.length} messages · attempt ${j.attempt_count} · created ${when(j.create_time)}`,
      j.model ? h("span", { class: "muted" }, ` · ${j.model}, ${j.cost.llm_call_count} LLM calls`) : null,
    ),
    j.error ? h("p", { class: "state state-error" }, j.error) : null,
    j.failed_attempts.length
      ? h("ol", { class: "attempts" }, j.failed_attempts.map((f) => h("li", {}, `attempt ${f.attempt} at ${when(f.fail_time)}: `, f.error)))
      : null,
    j.operations.length
      ? h(
          "ul",
          { class: "operations" },
          j.operations.map((o) =>
            h(
              "li",
              {},
              h("strong", {}, o.operation),
              o.fact ? ` ${o.fact}` : "",
              ` — ${o.outcome}`,
              o.memory_id ? [" ", h("a", { href: `#/memory/${encodeURIComponent(o.memory_id)}` }, "memory")] : null,
            ),
          ),
        )
      : h("p", { class: "muted" }, j.status === "done" ? "Nothing extracted." : "No decisions yet."),
    h("p", { class: "muted mono" }, `job ${j.id}`),
  );
}

export function jobsView() {
  const status = h("select", { name: "status" }, STATES.map(([v, t]) => h("option", { value: v }, t)));
  const list = h("div", {});
  const pager = h("div", { class: "pager" });
  const tokens = [""];
  let page = 0;

  async function load() {
    replace(list, state("loading", "Loading jobs…"));
    replace(pager);
    let reply;
    try {
      reply = await call("GET", `jobs${query({ status: status.value, page_token: tokens[page] })}`);
    } catch (error) {
      replace(list, state("error", `Could not list jobs: ${error.message}`));
      return;
    }
    replace(list, reply.jobs.length ? reply.jobs.map(jobCard) : state("empty", "No write-back jobs in this state."));
    replace(
      pager,
      h("button", { type: "button", disabled: page === 0, onclick: () => { page -= 1; load(); } }, "Previous"),
      h("span", {}, `page ${page + 1}`),
      h(
        "button",
        { type: "button", disabled: !reply.next_page_token, onclick: () => { tokens[page + 1] = reply.next_page_token; page += 1; load(); } },
        "Next",
      ),
    );
  }

  const form = h(
    "form",
    { class: "filters", onsubmit: (event) => { event.preventDefault(); tokens.length = 1; page = 0; load(); } },
    field("state", status),
    h("button", { type: "submit" }, "Show"),
  );
  load();
  return h("section", { class: "view-jobs" }, h("h1", {}, "Write-back jobs"), form, list, pager);
}
