// A word diff of two texts (longest common subsequence over whitespace-split tokens),
// as DOM nodes: removed words in <del>, added ones in <ins>, the rest as text.

import { h } from "./dom.js";

const MAX_CELLS = 250000; // beyond this, show before and after whole

export function wordDiff(before, after) {
  const a = before.split(/(\s+)/);
  const b = after.split(/(\s+)/);
  if (a.length * b.length > MAX_CELLS) {
    return [h("del", {}, before), h("ins", {}, after)];
  }
  const lcs = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i -= 1) {
    for (let j = b.length - 1; j >= 0; j -= 1) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      out.push(a[i]);
      i += 1;
      j += 1;
    } else if (i < a.length && (j === b.length || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out.push(h("del", {}, a[i]));
      i += 1;
    } else {
      out.push(h("ins", {}, b[j]));
      j += 1;
    }
  }
  return out;
}
