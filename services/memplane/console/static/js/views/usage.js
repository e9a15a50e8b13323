// Usage of the key's workspace: memories added per day as bars (an SVG drawn with DOM
// calls: the CSP allows no inline style, and SVG attributes are not style).

import { call, query } from "../api.js";
import { field, h, replace, state } from "../dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 900;
const HEIGHT = 220;
const MARGIN = 30;

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function bars(days) {
  const max = Math.max(1, ...days.map((d) => d.memories_added));
  const step = (WIDTH - 2 * MARGIN) / days.length;
  const chart = svg("svg", { class: "bars", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": "memories added per day" });
  chart.append(svg("line", { x1: MARGIN, y1: HEIGHT - MARGIN, x2: WIDTH - MARGIN, y2: HEIGHT - MARGIN, class: "axis" }));
  chart.append(svg("text", { x: 2, y: MARGIN - 10, class: "tick" }, String(max)));
  days.forEach((d, i) => {
    const height = ((HEIGHT - 2 * MARGIN) * d.memories_added) / max;
    const x = MARGIN + i * step + step * 0.15;
    chart.append(
      svg(
        "rect",
        { x, y: HEIGHT - MARGIN - height, width: step * 0.7, height, class: "bar" },
        svg("title", {}, `${d.date}: ${d.memories_added} memories added`),
      ),
    );
    if (days.length <= 31 && (i % Math.ceil(days.length / 10) === 0 || i === days.length - 1)) {
      chart.append(svg("text", { x, y: HEIGHT - 10, class: "tick" }, d.date.slice(5)));
    }
  });
  return chart;
}

export function usageView() {
  const days = h("select", { name: "days" }, [7, 14, 30, 60].map((n) => h("option", { value: n, selected: n === 14 }, `${n} days`)));
  const out = h("div", {});
  async function load() {
    replace(out, state("loading", "Counting…"));
    let reply;
    try {
      reply = await call("GET", `usage/daily${query({ days: days.value })}`);
    } catch (error) {
      replace(out, state("error", `No usage: ${error.message}`));
      return;
    }
    const added = reply.days.reduce((sum, d) => sum + d.memories_added, 0);
    replace(
      out,
      h("p", { class: "usage-facts" }, `${added} memories added in ${reply.days.length} days; ${reply.total} stored in all (superseded and expired included).`),
      added ? bars(reply.days) : state("empty", "No memories were added in these days."),
      h("p", { class: "muted" }, "Counted by the server from the memories still stored: deleted ones are not counted. Quotas and the admin view's gauges need the admin key."),
    );
  }
  days.addEventListener("change", load);
  load();
  return h("section", { class: "view-usage" }, h("h1", {}, "Usage"), h("div", { class: "filters" }, field("period", days)), out);
}
