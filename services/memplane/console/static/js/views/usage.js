// Usage of the key's workspace: memories added (writes) and searches per UTC day, as
// paired bars (an SVG drawn with DOM calls: the CSP allows no inline style, and SVG
// attributes are not style).

import { call, query } from "../api.js";
import { field, h, replace, state } from "../dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 900;
const HEIGHT = 240;
const MARGIN = 30;
const SERIES = [
  { key: "memories_added", cls: "added", label: "memories added" },
  { key: "searches", cls: "searches", label: "searches" },
];

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function bars(days) {
  const max = Math.max(1, ...days.flatMap((d) => SERIES.map((s) => d[s.key])));
  const step = (WIDTH - 2 * MARGIN) / days.length;
  const width = (step * 0.8) / SERIES.length;
  const chart = svg("svg", { class: "bars", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": "memories added and searches per day" });
  chart.append(svg("line", { x1: MARGIN, y1: HEIGHT - MARGIN, x2: WIDTH - MARGIN, y2: HEIGHT - MARGIN, class: "axis" }));
  chart.append(svg("text", { x: 2, y: MARGIN - 10, class: "tick" }, String(max)));
  SERIES.forEach((s, j) => {
    const x = WIDTH - MARGIN - 260 + j * 130;
    chart.append(svg("rect", { x, y: 6, width: 10, height: 10, class: `swatch ${s.cls}` }));
    chart.append(svg("text", { x: x + 14, y: 15, class: "legend" }, s.label));
  });
  days.forEach((d, i) => {
    const x0 = MARGIN + i * step + step * 0.1;
    SERIES.forEach((s, j) => {
      const height = ((HEIGHT - 2 * MARGIN) * d[s.key]) / max;
      chart.append(
        svg(
          "rect",
          { x: x0 + j * width, y: HEIGHT - MARGIN - height, width, height, class: `bar ${s.cls}`, "data-date": d.date },
          svg("title", {}, `${d.date}: ${d[s.key]} ${s.label}`),
        ),
      );
    });
    if (days.length <= 31 && (i % Math.ceil(days.length / 10) === 0 || i === days.length - 1)) {
      chart.append(svg("text", { x: x0, y: HEIGHT - 10, class: "tick" }, d.date.slice(5)));
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
    const searches = reply.days.reduce((sum, d) => sum + d.searches, 0);
    replace(
      out,
      h("p", { class: "usage-facts" }, `${added} memories added in ${reply.days.length} days; ${reply.total} stored in all (superseded and expired included).`),
      h("p", { class: "usage-searches" }, `${searches} searches in ${reply.days.length} days.`),
      added || searches ? bars(reply.days) : state("empty", "No memories were added and nothing was searched in these days."),
      h(
        "p",
        { class: "muted" },
        "Counted by the server: memories still stored, by the day they were added (deleted ones are not counted); searches are SearchMemories and SelectMemoryFiles calls answered, each counted once (other retrieval servers' within a few seconds). Quotas and the admin view's gauges need the admin key.",
      ),
    );
  }
  days.addEventListener("change", load);
  load();
  return h("section", { class: "view-usage" }, h("h1", {}, "Usage"), h("div", { class: "filters" }, field("period", days)), out);
}
