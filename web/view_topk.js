// view_topk.js - each query's strongest keys, with their tokens: weights_select's top_k for one
// head (or the mean of the heads), computed by the daemon as the keys stream past, so it works
// at any length. The queries listed are those of the Heads map's window (the whole input when it
// is short), a page at a time; the keys ranked are the window's keys.
//
// Testing contract: one row per query, <tr data-query="i">; in it one cell per key, largest first
// (the daemon's order), <td data-key="j" data-v="the weight as the API wrote it">.

import {h} from "./dom.js";
import {f32, short, count} from "./format.js";
import {cellMasked} from "./masks.js";
import {nested} from "./export.js";
import {currentWindow} from "./view_zoom.js";

export const TOPK_ROWS = 100;

export function renderTopk(app, root) {
  const {H, L, S, qLabels, kLabels} = app.input;
  const s = app.state, k = s.topk;
  const win = app.result.big ? currentWindow(app) : {q: [0, L], k: [0, S]};
  const head = s.head === "mean" || (Number.isInteger(s.head) && s.head < H) ? s.head : "mean";
  const first = Math.min(win.q[1] - 1, Math.max(win.q[0], s.tq ?? win.q[0]));
  const last = Math.min(win.q[1], first + TOPK_ROWS);
  const sel = {queries: [first, last], keys: win.k, topK: k, ...(head === "mean" ? {} : {heads: [head]})};
  root.replaceChildren(h("p", {class: "muted"}, "asking for the top-k…"));
  const t0 = performance.now();
  return app.select(sel, {average: head === "mean"}).then((r) => {
    if (root.dataset.view !== "topk") return null;
    app.result.ms = performance.now() - t0;
    const t = r.attnTopk;
    if (!t) throw new Error("the daemon answered without attn_topk");
    const kk = t.shape[t.shape.length - 1], rows = last - first;
    if (t.indices.length !== rows * kk) throw new Error(`attn_topk has shape [${t.shape}], expected ${rows} rows of ${kk}`);
    const title = head === "mean" ? "the mean of the heads" : `head ${head}`;

    const pickHead = h("select", {id: "topk-head", "aria-label": "head"},
      h("option", {value: "mean", selected: head === "mean"}, "mean of heads"),
      [...Array(H).keys()].map((x) => h("option", {value: String(x), selected: head === x}, `head ${x}`)));
    pickHead.addEventListener("change", () => app.setState({head: pickHead.value === "mean" ? "mean" : Number(pickHead.value)}));
    const pickK = h("input", {id: "topk-k", type: "number", min: "1", max: "64", value: String(k), "aria-label": "k"});
    pickK.addEventListener("change", () => app.setState({topk: Math.min(64, Math.max(1, parseInt(pickK.value, 10) || 8))}));
    const page = (to) => app.setState({tq: to === win.q[0] ? null : to});
    const prev = h("button", {type: "button", id: "topk-prev", disabled: first <= win.q[0], onclick: () => page(Math.max(win.q[0], first - TOPK_ROWS))}, `previous ${TOPK_ROWS}`);
    const next = h("button", {type: "button", id: "topk-next", disabled: last >= win.q[1], onclick: () => page(last)}, `next ${TOPK_ROWS}`);

    const body = [];
    for (let i = 0; i < rows; i++) {
      const q = first + i, cells = [];
      for (let x = 0; x < kk; x++) {
        const j = t.indices[i * kk + x], v = t.values[i * kk + x];
        // a row with fewer allowed keys than k ranks masked ones last, at weight 0: say so
        const masked = cellMasked(app.input, q, j);
        cells.push(h("td", {dataset: {key: String(j), v: f32(v), ...(masked ? {masked: "1"} : {})}, class: masked ? "masked" : ""},
          h("button", {type: "button", class: "topk-key", title: `key ${j} "${kLabels[j] ?? j}": weight ${f32(v)}${masked ? " (masked)" : ""} (click: pick query ${q} and key ${j})`,
                       onclick: () => app.setState({qi: q, kj: j})},
            h("span", {class: "tok-text"}, kLabels[j] ?? String(j)), h("span", {class: "mono"}, ` ${j} · ${masked ? "masked" : short(v)}`),
            h("span", {class: "bar", style: {width: `${Math.max(1, Math.round(v * 100))}%`}}))));
      }
      body.push(h("tr", {dataset: {query: String(q)}, class: q === s.qi ? "sel" : ""},
        h("th", {class: "mono"}, String(q)), h("th", {class: "tok-text"}, qLabels[q] ?? String(q)), cells));
    }
    const where = win.k[0] === 0 && win.k[1] === S ? `all ${count(S)} keys` : `keys ${win.k[0]}–${win.k[1] - 1} (the window)`;
    root.replaceChildren(
      h("p", {class: "hint"}, `For each query, the ${kk} keys with the largest weights in ${title}, largest first, among ${where}: ` +
        "the daemon keeps them as the keys stream past (weights_select.top_k), so this works at any length. Click a key to pick it for the neuron view."),
      h("div", {class: "zoom-bar"}, h("label", {}, "of ", pickHead), h("label", {}, "k ", pickK), prev, next,
        h("span", {class: "mono", dataset: {rows: `${first}:${last}`}}, `queries ${first}–${last - 1} of ${win.q[0]}–${win.q[1] - 1}`)),
      h("div", {class: "topk-wrap"}, h("table", {class: "topk"},
        h("thead", {}, h("tr", {}, h("th", {}, "query"), h("th", {}, "token"), [...Array(kk).keys()].map((x) => h("th", {}, `#${x + 1}`)))),
        h("tbody", {}, body))));
    return {
      exportData: () => ({head, k: kk, queries: [first, last], keys: win.k,
                          indices: nested(Float32Array.from(t.indices), [rows, kk]), values: nested(t.values, [rows, kk])}),
    };
  });
}
