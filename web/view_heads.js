// view_heads.js - per-head attention maps as small multiples, their mean, one colour scale, and
// one map enlarged with its token labels (CircuitsVis's attention-heads layout).
//
// Testing contract: every map's canvas carries data-head="0".."H-1" or data-head="mean";
// canvas pixel (c, r) is cell (query r, key c).

import {h} from "./dom.js";
import {f32} from "./format.js";
import {paint, range, mapView, legend} from "./heatmap.js";
import {compose, nested} from "./export.js";
import {cellMasked} from "./masks.js";

/** Colour scale top shared by all maps: 1, or the largest weight drawn. */
export function scaleTop(app, arrays) {
  if (app.state.vmax === "1") return 1;
  let hi = 0;
  for (const [data, n] of arrays) hi = Math.max(hi, range(data, 0, n, null)[1]);
  return hi > 0 ? hi : 1;
}

/** Text of one cell: where it is and the API's exact value. */
export function cellText(app, which, r, c, v) {
  const {qLabels, kLabels, S} = app.input;
  const empty = emptyMask(app)[r * S + c];
  return `${which} · query ${r} "${qLabels[r] ?? r}" → key ${c} "${kLabels[c] ?? c}"\n` +
         `weight ${f32(v)}${empty ? "  (masked)" : ""}`;
}

/** Cells the page knows are masked (causal, the layer's window, padding; masks.js): [L * S],
 * 1 = empty. */
export function emptyMask(app) {
  const {L, S, S0, causal, pad, window, qoff, koff} = app.input;
  const key = `${L}:${S}:${causal}:${pad}:${window}:${qoff}:${koff}`;
  if (app.input.emptyKey === key) return app.input.empty;
  const m = new Uint8Array(L * S);
  for (let i = 0; i < L; i++)
    for (let j = 0; j < S0; j++) if (cellMasked(app.input, i, j)) m[i * S + j] = 1;
  app.input.empty = m;
  app.input.emptyKey = key;
  return m;
}

export function renderHeads(app, root) {
  const {weights, mean} = app.result;
  const [H, L, S] = weights.shape;
  const cmap = app.state.cmap;
  const empty = emptyMask(app);
  const hi = scaleTop(app, [[weights.data, weights.data.length], [mean.data, mean.data.length]]);
  const thumbs = [];
  const readout = h("div", {class: "readout", "aria-live": "polite"});

  const card = (head) => {
    const isMean = head === "mean";
    const off = isMean ? 0 : head * L * S;
    const data = isMean ? mean.data : weights.data;
    const title = isMean ? "mean of heads" : `head ${head}`;
    const mv = mapView({
      rows: L, cols: S, maxPx: H > 8 ? 150 : 200, maxCell: 24, label: `attention weights, ${title}`,
      canvasProps: {dataset: {head: String(head)}},
      describe: (r, c) => cellText(app, title, r, c, data[off + r * S + c]),
      onCursor: (r, c, text) => (readout.textContent = text.replace("\n", " · ")),
      activate: () => app.setState({head: app.state.head === head ? null : head}),
    });
    paint(mv.canvas, data, {offset: off, rows: L, cols: S, lo: 0, hi, cmap, empty, log: app.state.log});
    thumbs.push({title, canvas: mv.canvas});
    const selected = app.state.head === head;
    return h("div", {class: `map-card${selected ? " selected" : ""}`},
      h("button", {type: "button", class: "title", "aria-pressed": String(selected), title: "enlarge",
                   onclick: () => app.setState({head: selected ? null : head})}, title), mv.el);
  };

  const cards = [];
  for (let head = 0; head < H; head++) cards.push(card(head));
  cards.push(card("mean"));

  const parts = [
    h("p", {class: "hint"}, `Rows are queries, columns keys; each row sums to 1. Hover a cell for the exact weight the API returned; click a map (or Enter) to enlarge it.`),
    legend(cmap, 0, hi, {label: "weight", log: app.state.log}),
    h("div", {class: "maps"}, cards),
    readout,
  ];
  const zoomHead = app.state.head;
  if (zoomHead != null && (zoomHead === "mean" || zoomHead < H)) parts.push(zoom(app, zoomHead, hi));
  root.replaceChildren(...parts);

  return {
    exportCanvas: () => compose(thumbs, {heading: `${app.layer.name}: attention weights per head (rows: queries, columns: keys)`}),
    exportData: () => ({attn_weights: {shape: [H, L, S], axes: ["H", "L", "S"], data: nested(weights.data, [H, L, S])},
                        attn_weights_mean: {shape: [L, S], axes: ["L", "S"], data: nested(mean.data, [L, S])},
                        output: {shape: app.result.output.shape, data: nested(app.result.output.data, app.result.output.shape)}}),
  };
}

/** One map, large, with token labels: key labels toggle padding, a cell picks (query, key). */
function zoom(app, head, hi) {
  const {weights, mean} = app.result;
  const [, L, S] = weights.shape;
  const {qLabels, kLabels, S0, pad} = app.input;
  const isMean = head === "mean";
  const data = isMean ? mean.data : weights.data, off = isMean ? 0 : head * L * S;
  const title = isMean ? "mean of heads" : `head ${head}`;
  const readout = h("div", {class: "readout", "aria-live": "polite"});
  const mv = mapView({
    rows: L, cols: S, maxPx: 640, maxCell: 40, label: `attention weights, ${title}, enlarged`,
    canvasProps: {dataset: {head: String(head), zoom: "1"}},
    describe: (r, c) => cellText(app, title, r, c, data[off + r * S + c]),
    onCursor: (r, c, text) => (readout.textContent = text.replace("\n", " · ")),
    activate: (r, c) => {
      app.setState({qi: r, kj: c});
      readout.textContent = `picked query ${r} "${qLabels[r]}", key ${c} "${kLabels[c]}" for the trace's neuron view`;
    },
  });
  paint(mv.canvas, data, {offset: off, rows: L, cols: S, lo: 0, hi, cmap: app.state.cmap, empty: emptyMask(app), log: app.state.log});
  mv.box(app.state.qi, app.state.kj, app.state.qi + 1, app.state.kj + 1, "var(--accent)", "picked for the neuron view");
  const [w, hgt] = mv.cssSize;
  const cw = w / S, ch = hgt / L;
  const showLabels = cw >= 9 && ch >= 9;
  const klabels = h("div", {class: "klabels", style: {width: `${w}px`}}, showLabels ? kLabels.map((t, j) =>
    j < S0 ? h("button", {type: "button", class: "klabel", style: {width: `${cw}px`}, "aria-pressed": String(pad.includes(j)),
                          title: `key ${j} "${t}": click to ${pad.includes(j) ? "unmask" : "mask"} it`, onclick: () => app.togglePad(j)}, t)
           : h("span", {class: "klabel", style: {width: `${cw}px`}}, t)) : null);
  const qlabels = h("div", {class: "qlabels", style: {height: `${hgt}px`}}, showLabels ? qLabels.map((t) =>
    h("div", {class: "qlabel", style: {height: `${ch}px`}}, t)) : null);
  return h("section", {class: "zoom-wrap"},
    h("h3", {}, `${title}, enlarged `, h("button", {type: "button", onclick: () => app.setState({head: null})}, "close")),
    showLabels ? null : h("p", {class: "hint"}, "Too many tokens for labels: hover a cell, or focus the map and use the arrow keys."),
    h("div", {class: "zoom"}, h("div"), klabels, qlabels, mv.el), readout);
}
