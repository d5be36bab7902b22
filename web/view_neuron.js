// view_neuron.js - the neuron view (after bertviz's): for query i and key j, per head, the
// vectors q_i and k_j after the split into heads, their elementwise product, its sum scaled by
// 1/√hd, the score the trace returned (masks included), and the softmax row with j marked.
// Every number is the trace's; the sum is also recomputed here to show where the score comes from.
//
// Elements carry data-neuron="q|k|qk|dot|score|weight" and data-neuron-head="h"; vector cells
// carry their exact value in data-v.

import {h} from "./dom.js";
import {f32, short} from "./format.js";
import {css} from "./colormap.js";

export function renderNeuron(app, trace) {
  const q = trace.stage("q_heads"), k = trace.stage("k_heads"), scores = trace.stage("scores"), w = trace.stage("attn_weights");
  const box = h("section", {class: "step neuron", id: "neuron", dataset: {neuronView: "1"}});
  if (!q || !k || !scores || !w || !q.axes || !k.axes || !scores.axes || !w.axes) {
    box.append(h("p", {class: "hint"}, "The neuron view needs the q_heads, k_heads, scores and attn_weights stages with known axes."));
    return box;
  }
  const headAxis = (st) => st.axes.find((a) => a !== "N" && a !== "L" && a !== "S" && a !== "D") || "H";
  const H = q.size(headAxis(q)), Hk = k.size(headAxis(k)), D = q.size("D"), S = k.size("S");
  // the rows and keys the weights hold: all of them, or a long input's window (from q0, k0)
  const q0 = w.start("L"), Lw = w.size("L"), k0 = w.start("S");
  const Sw = w.size("S"); // keys of the softmax (appended bias_k / zero keys included)
  const {qLabels, kLabels} = app.input;
  const clamp = (v, lo, n) => Math.min(lo + n - 1, Math.max(lo, v));
  const i = clamp(app.state.qi, q0, Lw), j = clamp(app.state.kj, k0, Sw);
  // a long row shows its bars around key j
  const b0 = Sw > 256 ? clamp(j - 128, k0, Sw - 255) : k0, b1 = Math.min(k0 + Sw, b0 + 256);

  const options = (labels, lo, n, at) => labels.slice(lo, lo + n).map((t, x) => h("option", {value: String(lo + x), selected: lo + x === at}, `${lo + x}: ${t}`));
  const pickQ = h("select", {"aria-label": "query", id: "neuron-q"}, options(qLabels, q0, Lw, i));
  const pickK = h("select", {"aria-label": "key", id: "neuron-k"}, options(kLabels, k0, Sw, j));
  pickQ.addEventListener("change", () => app.setState({qi: Number(pickQ.value)}));
  pickK.addEventListener("change", () => app.setState({kj: Number(pickK.value)}));

  // one colour scale for q and k, one for their product, over all heads
  let mv = 1e-12, mp = 1e-12;
  const rows = [];
  for (let head = 0; head < H; head++) {
    const kh = Math.floor((head * Hk) / H); // grouped-query: the kv head this query head reads
    const qi = [], kj = [], prod = [];
    for (let d = 0; d < D; d++) {
      qi.push(q.get({[headAxis(q)]: head, L: i, D: d}));
      kj.push(j < S ? k.get({[headAxis(k)]: kh, S: j, D: d}) : NaN);
      prod.push(Math.fround(qi[d] * kj[d]));
    }
    qi.concat(kj).forEach((v) => Number.isFinite(v) && (mv = Math.max(mv, Math.abs(v))));
    prod.forEach((v) => Number.isFinite(v) && (mp = Math.max(mp, Math.abs(v))));
    const sum = prod.reduce((a, b) => a + b, 0) / Math.sqrt(D);
    const score = scores.get({[headAxis(scores)]: head, L: i, S: j});
    const row = [];
    for (let x = b0; x < b1; x++) row.push(w.get({[headAxis(w)]: head, L: i, S: x}));
    rows.push({head, kh, qi, kj, prod, sum, score, row});
  }

  const vec = (vals, scale, what, head) => h("div", {class: "vec", dataset: {neuron: what, neuronHead: String(head)}},
    vals.map((v, d) => h("span", {title: `${what}[${d}] = ${f32(v)}`, dataset: {v: f32(v)},
                                  style: {background: Number.isFinite(v) ? css("diverging", 0.5 + v / (2 * scale)) : "transparent"}})));
  const maxW = Math.max(1e-12, ...rows.flatMap((r) => r.row));
  const bars = (r) => h("div", {class: "bars", dataset: {neuron: "softmax", neuronHead: String(r.head)}},
    r.row.map((v, x) => h("span", {class: b0 + x === j ? "sel" : v === 0 && !Number.isFinite(scores.get({[headAxis(scores)]: r.head, L: i, S: b0 + x})) ? "masked" : "",
                                   title: `key ${b0 + x} "${kLabels[b0 + x] ?? b0 + x}": ${f32(v)}`, dataset: {v: f32(v)},
                                   style: {height: `${Math.max(1, (v / maxW) * 32)}px`}})));

  const note = j >= S ? `key ${j} is appended by the layer (bias_k or the zero key): no k_heads row, its score comes from the layer's parameters.` : "";
  box.append(
    h("h3", {}, "Neuron view ", h("span", {class: "what"}, "one query and one key, per head: where a weight comes from")),
    h("div", {class: "pick"}, h("label", {}, "query i ", pickQ), h("label", {}, "key j ", pickK),
      h("span", {class: "hint"}, `score = Σ_d q_i[d]·k_j[d] / √${D} (+ mask); weight = softmax over the keys of row i` +
        (b1 - b0 < Sw || k0 > 0 ? ` (bars: keys ${b0}–${b1 - 1})` : ` (${Sw})`))),
    note ? h("p", {class: "hint"}, note) : "",
    h("table", {},
      h("thead", {}, h("tr", {}, ["head", `q_i (${D})`, `k_j (${D})`, "q_i ∘ k_j", "Σ / √hd (here)", "score (API)", "softmax row", "weight (API)"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.map((r) => h("tr", {dataset: {neuronRow: String(r.head)}},
        h("th", {}, Hk !== H ? `${r.head} (kv ${r.kh})` : String(r.head)),
        h("td", {}, vec(r.qi, mv, "q", r.head)),
        h("td", {}, vec(r.kj, mv, "k", r.head)),
        h("td", {}, vec(r.prod, mp, "qk", r.head)),
        h("td", {class: "num", dataset: {neuron: "dot", neuronHead: String(r.head)}}, Number.isFinite(r.sum) ? short(r.sum, 6) : "—"),
        h("td", {class: "num", dataset: {neuron: "score", neuronHead: String(r.head)}}, f32(r.score)),
        h("td", {}, bars(r)),
        h("td", {class: "num", dataset: {neuron: "weight", neuronHead: String(r.head)}}, f32(r.row[j - b0])))))),
    h("p", {class: "hint"}, "Σ/√hd is summed here in float64 from the trace's float32 values; the score column is the daemon's own number " +
      "(it differs in the last digits by round-off, and by the mask or any position bias the layer adds)."));
  return box;
}
