// view_compare.js - "is multi-head the same as single-head?": the layer's very weights served
// again with another num_heads (a second layer, <name>.h<H2>, made from one weight set), both
// run on the same input, their per-head maps side by side and the difference of their outputs.

import {h} from "./dom.js";
import {f32, short, count} from "./format.js";
import {paint, range, mapView, legend} from "./heatmap.js";
import {compose, nested} from "./export.js";
import {scaleTop, emptyMask} from "./view_heads.js";

/** Divisors of E other than H: the head counts these weights can be served with. */
export function otherHeadCounts(E, H) {
  const out = [];
  for (let d = 1; d <= E; d++) if (E % d === 0 && d !== H) out.push(d);
  return out;
}

export function comparisonName(name, H2) {
  const suffix = `.h${H2}`;
  return name.slice(0, 64 - suffix.length) + suffix;
}

/** Why these weights cannot be served with another H (shapes would change), or null. */
function cannotCompare(info) {
  const c = info.config, E = c.embed_dim, H = c.num_heads;
  if ((info.head_dim ?? E / H) * H !== E) return `head_dim (${info.head_dim}) × num_heads ≠ embed_dim: the weights' shapes depend on H.`;
  if (c.num_kv_heads != null && c.num_kv_heads !== H) return "grouped kv heads: the weights' shapes depend on the head counts.";
  return null;
}

/** Ensures the comparison layer exists with the source's current weights; returns its describe. */
async function ensureLayer(app, H2) {
  const info = app.layer.info, name = comparisonName(app.layer.name, H2);
  const layers = await app.call((c) => c.list());
  const have = layers.find((l) => l.name === name);
  // versions grow with every change on a daemon: a comparison made after the source's last change is current
  // the head counts and head_dim follow H2 (describe spells out the source's resolved ones)
  const perH = new Set(["num_heads", "head_dim", "num_kv_heads"]);
  const fresh = have && have.version > info.version && have.config.num_heads === H2 &&
    Object.keys(info.config).every((k) => perH.has(k) || JSON.stringify(have.config[k]) === JSON.stringify(info.config[k]));
  if (!fresh) {
    const weights = await app.weights();
    await app.call((c) => c.put(name, {config: {...info.config, num_heads: H2, head_dim: null, num_kv_heads: null}, weights}));
    app.refreshLayers().catch(() => {});
  }
  return app.call((c) => c.describe(name));
}

export function renderCompare(app, root) {
  const info = app.layer.info, c = info.config, E = c.embed_dim, H = c.num_heads;
  const why = cannotCompare(info);
  if (why) {
    root.replaceChildren(h("p", {class: "message"}, `These weights cannot be served with another number of heads: ${why}`));
    return null;
  }
  const choices = otherHeadCounts(E, H);
  if (!choices.length) {
    root.replaceChildren(h("p", {class: "message"}, `embed_dim ${E} has no divisor other than ${H}: nothing to compare with.`));
    return null;
  }
  const H2 = choices.includes(app.state.cmp) ? app.state.cmp : H !== 1 ? 1 : choices[0];
  const pick = h("select", {"aria-label": "other num_heads", id: "compare-h"}, choices.map((d) => h("option", {value: String(d), selected: d === H2}, `H = ${d}`)));
  pick.addEventListener("change", () => app.setState({cmp: Number(pick.value)}));
  const body = h("div", {}, h("p", {class: "muted"}, `serving the same weights as ${comparisonName(app.layer.name, H2)}…`));
  root.replaceChildren(
    h("p", {class: "hint"}, `The same parameters, served with another num_heads (a second layer made from this one's weights; the count stays ${count(info.parameter_count)}), on the same input.`),
    h("div", {class: "pick"}, h("label", {}, "compare with ", pick)), body);

  return (async () => {
    try {
      const other = await ensureLayer(app, H2);
      const req = {...app.input.request, needWeights: true, averageAttnWeights: false};
      const [a, b] = [app.result, await app.call((cl) => cl.forward(other.name, req))];
      if (root.dataset.view !== "compare") return null;
      return drawComparison(app, body, other, a, b);
    } catch (e) {
      body.replaceChildren(h("p", {class: "message", role: "alert"}, app.errorText(e)));
      return null;
    }
  })();
}

function drawComparison(app, body, other, a, b) {
  const {L, S} = app.input;
  const H = a.weights.shape[0], H2 = b.attnWeights.shape[0];
  const empty = emptyMask(app);
  const hi = scaleTop(app, [[a.weights.data, a.weights.data.length], [b.attnWeights.data, b.attnWeights.data.length]]);
  const exportList = [];
  const grid = (label, data, heads) => h("div", {class: "maps"}, Array.from({length: heads}, (_, head) => {
    const mv = mapView({rows: L, cols: S, maxPx: heads > 8 ? 90 : 130, maxCell: 16, label: `${label} head ${head}`,
      canvasProps: {dataset: {head: String(head)}},
      describe: (r, c) => `${label} · head ${head} · query ${r} "${app.input.qLabels[r]}" → key ${c} "${app.input.kLabels[c]}"\nweight ${f32(data[head * L * S + r * S + c])}`});
    paint(mv.canvas, data, {offset: head * L * S, rows: L, cols: S, lo: 0, hi, cmap: app.state.cmap, empty, log: app.state.log});
    exportList.push({title: `${label} head ${head}`, canvas: mv.canvas});
    return h("div", {class: "map-card"}, h("span", {class: "title"}, `head ${head}`), mv.el);
  }));

  const outA = a.output, outB = b.output;
  const n = outA.data.length, diff = new Float32Array(n);
  let maxDiff = 0, maxAbs = 0;
  for (let i = 0; i < n; i++) {
    diff[i] = Math.abs(outA.data[i] - outB.data[i]);
    maxDiff = Math.max(maxDiff, diff[i]);
    maxAbs = Math.max(maxAbs, Math.abs(outA.data[i]), Math.abs(outB.data[i]));
  }
  const [rows, cols] = outA.shape;
  const outMap = (label, data, cmap, lo, hi2) => {
    const mv = mapView({rows, cols, maxPx: 300, maxCell: 10, label,
      describe: (r, c) => `${label} · L=${r} "${app.input.qLabels[r]}" · E=${c}\n${f32(data[r * cols + c])}`});
    paint(mv.canvas, data, {rows, cols, lo, hi: hi2, cmap});
    exportList.push({title: label, canvas: mv.canvas});
    return h("div", {class: "map-card", dataset: {output: label}}, h("span", {class: "title"}, label), mv.el);
  };
  const m = Math.max(maxAbs, 1e-12);
  body.replaceChildren(
    legend(app.state.cmap, 0, hi, {label: "weight", log: app.state.log}),
    h("div", {class: "compare"},
      h("div", {dataset: {layer: app.layer.name}}, h("h3", {}, `H = ${H} (${app.layer.name})`), grid(`H=${H}`, a.weights.data, H)),
      h("div", {dataset: {layer: other.name}}, h("h3", {}, `H = ${H2} (${other.name})`), grid(`H=${H2}`, b.attnWeights.data, H2))),
    h("h3", {}, "Outputs, and how far apart they are"),
    h("div", {class: "maps"},
      outMap(`output, H=${H}`, outA.data, "diverging", -m, m),
      outMap(`output, H=${H2}`, outB.data, "diverging", -m, m),
      outMap("|difference|", diff, app.state.cmap, 0, Math.max(maxDiff, 1e-12))),
    legend("diverging", -m, m, {label: "output", emptyText: ""}),
    h("div", {class: "answer", dataset: {maxDiff: String(maxDiff)}},
      h("p", {}, h("b", {}, "Is multi-head the same as single-head? "),
        maxDiff > 0
          ? `No. The parameters are identical (${count(app.layer.info.parameter_count)} = ${count(other.parameter_count)}), yet the outputs differ by up to ${short(maxDiff, 4)} ` +
            `(largest |output| ${short(maxAbs, 4)}): with ${Math.max(H, H2)} heads each softmax sees only its own ${app.layer.cfg.embed_dim / Math.max(H, H2)} dimensions of q·k, ` +
            `so the heads can attend to different keys; with ${Math.min(H, H2)} the scores are pooled over ${app.layer.cfg.embed_dim / Math.min(H, H2)} dimensions before one softmax.`
          : "For this input the outputs agree exactly (try another input: in general they differ).")));
  return {
    exportCanvas: () => compose(exportList, {heading: `${app.layer.name}: H=${H} vs H=${H2}, same weights`, cellPx: 160}),
    exportData: () => ({layers: [app.layer.name, other.name], num_heads: [H, H2], max_abs_difference: maxDiff,
                        attn_weights: [nested(a.weights.data, a.weights.shape), nested(b.attnWeights.data, b.attnWeights.shape)],
                        outputs: [nested(outA.data, outA.shape), nested(outB.data, outB.shape)]}),
  };
}
