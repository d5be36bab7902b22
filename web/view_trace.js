// view_trace.js - the computation, stage by stage, with the numbers of /trace: the 11 stages as a
// pipeline with their shapes, each stage's tensor drawn (one panel per head after the split),
// and the neuron view of one (query, key) pair below.
//
// Testing contract: each stage is an element with data-stage="<stage name>".

import {h} from "./dom.js";
import {f32, shapeText} from "./format.js";
import {paint, range, mapView, legend} from "./heatmap.js";
import {compose, nested} from "./export.js";
import {renderNeuron} from "./view_neuron.js";
import {Stage} from "./attnd.js";

// The steps of torch's order of operations, and the stages each produces.
const STEPS = [
  {title: "In-projection", what: "x·Wᵀ + b with each third of in_proj_weight (or q/k/v_proj_weight)", stages: ["q_proj", "k_proj", "v_proj"]},
  {title: "Split into heads", what: "head h takes columns [h·hd, (h+1)·hd) of each projection: a reshape, no new parameters", stages: ["q_heads", "k_heads", "v_heads"]},
  {title: "Scores", what: "(q / √hd)·kᵀ per head, masks added (masked: −∞, drawn empty)", stages: ["scores"]},
  {title: "Softmax", what: "over the keys of each row: the attention weights", stages: ["attn_weights"]},
  {title: "Weighted sum", what: "weights · v, per head", stages: ["head_outputs"]},
  {title: "Concatenate", what: "the heads side by side again: [L, H·hd]", stages: ["concat"]},
  {title: "Out-projection", what: "concat·out_proj.weightᵀ + out_proj.bias", stages: ["output"]},
];

const KNOWN_AXES = new Set(["N", "L", "S", "E", "D"]);

/**
 * A stage as 2-D panels: batch (N) fixed at 0, one panel per index of the head axis (H, or
 * any other axis than N/L/S/E/D), rows and columns the remaining two axes in the stage's order.
 */
export function stagePanels(stage) {
  const shape = stage.shape;
  const axes = stage.axes || shape.map((_, i) => (i === shape.length - 1 ? "C" : i === shape.length - 2 ? "R" : `A${i}`));
  const strides = new Array(shape.length);
  for (let d = shape.length - 1, s = 1; d >= 0; d--) {
    strides[d] = s;
    s *= shape[d];
  }
  let free = axes.map((a, d) => d).filter((d) => axes[d] !== "N");
  let headDim = null;
  if (free.length >= 3) {
    headDim = free.find((d) => axes[d] === "H") ?? free.find((d) => !KNOWN_AXES.has(axes[d])) ?? free[0];
    free = free.filter((d) => d !== headDim);
  }
  while (free.length > 2) free = free.slice(1); // further leading axes: index 0
  const [rowDim, colDim] = free.length === 2 ? free : [null, free[0]];
  const rows = rowDim == null ? 1 : shape[rowDim], cols = shape[colDim];
  const count = headDim == null ? 1 : shape[headDim];
  const panels = [];
  for (let p = 0; p < count; p++) {
    const base = headDim == null ? 0 : p * strides[headDim];
    const data = new Float32Array(rows * cols);
    const rs = rowDim == null ? 0 : strides[rowDim], cs = strides[colDim];
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) data[r * cols + c] = stage.data[base + r * rs + c * cs];
    panels.push({index: p, data, rows, cols});
  }
  return {panels, rowAxis: rowDim == null ? null : axes[rowDim], colAxis: axes[colDim], headAxis: headDim == null ? null : axes[headDim]};
}

/**
 * A long input's stage cut to the window's queries (L) and keys (S) for drawing: thousands of rows
 * would be slivers. The stage keeps its shape in the API's reply; this copy starts at the window.
 */
export function cropStage(stage, win) {
  if (!win || !stage.axes || stage.select) return stage;
  const want = stage.axes.map((a, d) => (a === "L" ? win.q : a === "S" ? [win.k[0], Math.min(win.k[1], stage.shape[d])] : [0, stage.shape[d]]));
  if (want.every(([lo, hi], d) => lo === 0 && hi === stage.shape[d])) return stage;
  const shape = want.map(([lo, hi]) => hi - lo), out = new Float32Array(shape.reduce((a, b) => a * b, 1));
  const strides = stage.shape.map((_, d) => stage.shape.slice(d + 1).reduce((a, b) => a * b, 1));
  const idx = new Array(shape.length).fill(0);
  for (let o = 0; o < out.length; o++) {
    let src = 0;
    for (let d = 0; d < shape.length; d++) src += (want[d][0] + idx[d]) * strides[d];
    out[o] = stage.data[src];
    for (let d = shape.length - 1; d >= 0 && ++idx[d] === shape[d]; d--) idx[d] = 0;
  }
  const crop = new Stage(stage.name, shape, stage.axes, out, stage.axesGiven, {L: win.q[0], S: win.k[0], H: null});
  crop.fullShape = stage.shape;
  return crop;
}

function axisLabel(app, axis, i, stage) {
  i += stage.start(axis); // a long input's window starts later
  if (axis === "L") return `L=${i} "${app.input.qLabels[i] ?? i}"`;
  if (axis === "S") return `S=${i} "${app.input.kLabels[i] ?? i}"`;
  return `${axis}=${i}`;
}

function stageCard(app, stage, exportList, trace) {
  stage = cropStage(stage, app.traceWindow());
  const {panels, rowAxis, colAxis, headAxis} = stagePanels(stage);
  // the weights of masked scores (−∞) are drawn empty, as in the heatmaps
  const scores = stage.name === "attn_weights" && trace.stage("scores");
  const masked = scores && JSON.stringify(scores.shape) === JSON.stringify(stage.shape)
    ? stagePanels(scores).panels.map((p) => p.data.map((v) => (v === -Infinity ? 1 : 0))) : null;
  const weights = stage.name === "attn_weights";
  let lo, hi;
  if (weights) {
    lo = 0;
    hi = app.state.vmax === "1" ? 1 : Math.max(1e-12, ...panels.map((p) => range(p.data, 0, p.data.length)[1]));
  } else {
    const m = Math.max(1e-12, ...panels.map((p) => Math.max(...range(p.data, 0, p.data.length).map(Math.abs))));
    [lo, hi] = [-m, m];
  }
  const cmap = weights ? app.state.cmap : "diverging";
  const n = panels.length;
  const maxPx = n > 1 ? Math.max(70, Math.floor(560 / Math.min(n, 8))) : 300;
  const pickable = rowAxis === "L" && colAxis === "S";
  const drawn = panels.map((p) => {
    const head = headAxis ? `${headAxis}=${p.index}` : "";
    const mv = mapView({
      rows: p.rows, cols: p.cols, maxPx, maxCell: 14, label: `${stage.name} ${head}`,
      describe: (r, c) => `${stage.name}${head ? ` · ${head}` : ""}\n${rowAxis ? axisLabel(app, rowAxis, r, stage) + " · " : ""}${axisLabel(app, colAxis, c, stage)}\nvalue ${f32(p.data[r * p.cols + c])}`,
      activate: pickable ? (r, c) => app.setState({qi: r + stage.start("L"), kj: c + stage.start("S")}) : null,
    });
    paint(mv.canvas, p.data, {rows: p.rows, cols: p.cols, lo, hi, cmap, empty: masked ? masked[p.index] : null});
    exportList.push({title: `${stage.name} ${head}`, canvas: mv.canvas});
    return h("div", {class: "panel-h"}, head ? h("span", {}, headAxis === "H" ? `head ${p.index}` : head) : null, mv.el);
  });
  const from = (a) => (stage.start(a) ? ` from ${stage.start(a)}` : "");
  const dims = `${rowAxis ? `rows ${rowAxis}${from(rowAxis)}` : ""}${rowAxis ? ", " : ""}columns ${colAxis}${from(colAxis)}${headAxis ? `, one panel per ${headAxis}` : ""}`;
  return h("div", {class: "stage", dataset: {stage: stage.name}},
    h("span", {class: "name"}, stage.name),
    h("span", {class: "shape", dataset: {shape: JSON.stringify(stage.fullShape || stage.shape)}, title: stage.axesGiven ? "axes as the API named them" : "axes inferred from the stage name"},
      shapeText(stage.fullShape || stage.shape, stage.axes)),
    h("span", {class: "hint"}, dims),
    h("div", {class: "panels"}, drawn),
    legend(cmap, lo, hi, {emptyText: stage.name === "scores" ? "masked (−∞)" : masked ? "masked" : ""}));
}

export function renderTrace(app, root) {
  root.replaceChildren(h("p", {class: "muted"}, "tracing…"));
  return app.trace().then((trace) => {
    if (app.state.view !== "trace" || root.dataset.view !== "trace") return null;
    const exportList = [];
    const placed = new Set();
    const steps = [];
    for (const step of STEPS) {
      const here = step.stages.map((n) => trace.stage(n)).filter(Boolean);
      if (!here.length) continue;
      here.forEach((s) => placed.add(s.name));
      steps.push(h("section", {class: "step"}, h("h3", {}, `${step.title} `, h("span", {class: "what"}, step.what)),
        h("div", {class: "stages"}, here.map((s) => stageCard(app, s, exportList, trace)))));
    }
    for (const s of trace.stages) // stages a newer daemon adds: shown in order, under their own names
      if (!placed.has(s.name)) steps.push(h("section", {class: "step"}, h("h3", {}, s.name), h("div", {class: "stages"}, stageCard(app, s, exportList, trace))));
    const E = app.layer.cfg.embed_dim, win = app.traceWindow();
    root.replaceChildren(
      h("p", {class: "hint"}, `Every stage of one pass, with the numbers the API's trace returned (${trace.stages.length} stages; E=${E}). ` +
        "Hover a cell for its value; click a cell of scores or attn_weights to show that query and key in the neuron view below." +
        (win ? ` A long input: scores and attn_weights are those of queries ${win.q[0]}–${win.q[1] - 1} × keys ${win.k[0]}–${win.k[1] - 1} ` +
               "(weights_select; the window of the Heads map, or the picked query's row of it)." : "")),
      h("div", {class: "pipeline"}, steps.flatMap((s, i) => (i ? [h("div", {class: "arrow", "aria-hidden": "true"}, "↓"), s] : [s]))),
      renderNeuron(app, trace));
    return {
      exportCanvas: () => compose(exportList, {heading: `${app.layer.name}: trace`, cellPx: 160}),
      exportData: () => ({stages: trace.stages.map((s) => ({name: s.name, shape: s.shape, axes: s.axes, data: nested(s.data, s.shape)}))}),
    };
  });
  // a refusal (413 past the trace limit, ...) goes to render(), which shows it in the view and
  // clears the status line rather than saying the view was drawn
}
