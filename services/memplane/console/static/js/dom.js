// Building the page from data without HTML parsing: every string becomes a text node
// (memories are untrusted input), never innerHTML.

/**
 * An element: h("a", {href: "#/x", class: "c", onclick: fn}, "text", child, ...).
 * Attributes named on* are listeners; "href" must be an in-page "#..." link or one of the
 * console's own "api/..." downloads.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "href" && !/^(#|api\/)/.test(String(value))) throw new Error("only the console's own links");
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace *el*'s children. */
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A state line: kind "loading" | "empty" | "error" | "ok". */
export function state(kind, text) {
  return h("p", { class: `state state-${kind}`, role: kind === "error" ? "alert" : "status" }, text);
}

/** A labelled input. */
export function field(label, input) {
  return h("label", { class: "field" }, h("span", {}, label), input);
}

/** Short local time of an ISO string ("" stays ""). */
export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/** A number with *digits* decimals. */
export function num(x, digits = 3) {
  return typeof x === "number" ? x.toFixed(digits) : "–";
}

/** The scope as "user u · agent a · session s" (empty parts left out). */
export function scopeText(scope) {
  const parts = [];
  if (scope.user_id) parts.push(`user ${scope.user_id}`);
  if (scope.agent_id) parts.push(`agent ${scope.agent_id}`);
  if (scope.session_id) parts.push(`session ${scope.session_id}`);
  return parts.join(" · ") || "workspace-wide";
}
