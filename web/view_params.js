// view_params.js - the layer's parameters drawn, each head's slice outlined (its rows of the
// in-projection, its columns of the out-projection, as describe reports them), and the parameter
// count with its formula: where the split into heads happens, and whether H changes the count.

import {h} from "./dom.js";
import {f32, count, shapeText} from "./format.js";
import {paint, range, mapView, legend} from "./heatmap.js";
import {compose, nested} from "./export.js";

/**
 * Symbolic shapes of torch's parameter names, as functions of the config. Each gives
 * [symbol text, value] per dimension; used only when the values match the real shape.
 */
function symbols(info) {
  const c = info.config, E = c.embed_dim, H = c.num_heads;
  const hd = info.head_dim ?? c.head_dim ?? E / H, Hkv = c.num_kv_heads ?? H;
  const plain = hd * H === E && Hkv === H; // the torch case: head_dim = E/H
  const qd = plain ? ["E", E] : ["H·hd", H * hd];
  const kvd = plain ? ["E", E] : [Hkv === H ? "H·hd" : "Hkv·hd", Hkv * hd];
  const inRows = plain ? ["3E", 3 * E] : [Hkv === H ? "3H·hd" : "(H+2Hkv)·hd", (H + 2 * Hkv) * hd];
  const kd = c.kdim === E || c.kdim == null ? ["E", E] : ["kdim", c.kdim];
  const vd = c.vdim === E || c.vdim == null ? ["E", E] : ["vdim", c.vdim];
  return {
    plain,
    table: {
      in_proj_weight: [inRows, ["E", E]], in_proj_bias: [inRows],
      q_proj_weight: [qd, ["E", E]], k_proj_weight: [kvd, kd], v_proj_weight: [kvd, vd],
      "out_proj.weight": [["E", E], qd], "out_proj.bias": [["E", E]],
      bias_k: [["1", 1], ["1", 1], kvd], bias_v: [["1", 1], ["1", 1], kvd],
    },
  };
}

/** "3E·E" for a parameter whose shape matches its symbols, else null. */
export function symbolic(info, p) {
  const t = symbols(info).table[p.name];
  if (!t || t.length !== p.shape.length || t.some(([, v], i) => v !== p.shape[i])) return null;
  const parts = t.map(([s]) => s).filter((s) => s !== "1");
  return parts.length ? parts.join("·") : "1";
}

/** Every outlined slice of describe's heads: [{head, param, rows?, columns?, what}]. */
export function headSlices(info) {
  const out = [];
  const walk = (head, what, o) => {
    if (!o || typeof o !== "object") return;
    if (typeof o.param === "string" && (Array.isArray(o.rows) || Array.isArray(o.columns)))
      out.push({head, what, param: o.param, rows: o.rows, columns: o.columns});
    for (const [k, v] of Object.entries(o)) if (v && typeof v === "object" && k !== "rows" && k !== "columns") walk(head, what === "" ? k : `${what} ${k}`, v);
  };
  for (const hd of info.heads || []) walk(hd.head, "", hd);
  return out;
}

export function renderParams(app, root) {
  root.replaceChildren(h("p", {class: "muted"}, "loading the parameters…"));
  const info = app.layer.info;
  return app.weights().then((weights) => {
    if (root.dataset.view !== "params") return null;
    const colours = app.headColours();
    const slices = headSlices(info);
    const exportList = [];
    const cards = info.parameters.map((p) => {
      const t = weights[p.name];
      if (!t) return null;
      const rows = p.shape.length >= 2 ? p.shape[p.shape.length - 2] * (p.shape.length > 2 ? p.shape.slice(0, -2).reduce((a, b) => a * b, 1) : 1) : 1;
      const cols = p.shape[p.shape.length - 1];
      const m = Math.max(1e-12, ...range(t.data, 0, t.data.length).map(Math.abs));
      const vertical = p.shape.length === 1; // a bias: drawn as a column beside its matrix's rows
      const R = vertical ? cols : rows, C = vertical ? 1 : cols;
      const mv = mapView({
        rows: R, cols: C, maxPx: vertical ? 420 : 420, maxCell: vertical ? 8 : 6, label: p.name,
        describe: (r, c) => {
          const owner = slices.filter((s) => s.param === p.name && (!s.rows || (r >= s.rows[0] && r < s.rows[1])) && (!s.columns || (c >= s.columns[0] && c < s.columns[1])));
          return `${p.name}[${vertical ? r : `${r}, ${c}`}] = ${f32(t.data[r * C + c])}` + (owner.length ? `\n${owner.map((s) => `head ${s.head} ${s.what}`).join(", ")}` : "");
        },
      });
      paint(mv.canvas, t.data, {rows: R, cols: C, lo: -m, hi: m, cmap: "diverging"});
      if (vertical) mv.canvas.style.width = "12px";
      for (const s of slices.filter((x) => x.param === p.name)) {
        const col = colours[s.head % colours.length];
        if (s.rows) mv.box(s.rows[0], 0, s.rows[1], C, col, `head ${s.head} ${s.what}: rows [${s.rows[0]}, ${s.rows[1]})`);
        else if (s.columns) mv.box(0, s.columns[0], R, s.columns[1], col, `head ${s.head} ${s.what}: columns [${s.columns[0]}, ${s.columns[1]})`);
      }
      exportList.push({title: `${p.name} ${shapeText(p.shape)}`, canvas: mv.canvas});
      return h("div", {class: "map-card", dataset: {param: p.name}},
        h("span", {class: "title"}, h("b", {}, p.name), h("span", {class: "mono muted"}, shapeText(p.shape))), mv.el);
    });

    root.replaceChildren(
      countSection(app, info),
      h("div", {class: "head-toggles", "aria-label": "head colours"}, colours.map((c, i) => h("span", {}, h("span", {class: "swatch", style: {background: c}}), `head ${i} `))),
      h("p", {class: "hint"}, "Outlines: each head's rows of the in-projection (q, k, v) and its columns of out_proj.weight, from describe's \"heads\". Hover a cell for its value."),
      legend("diverging", -1, 1, {label: "value / max |value| of each parameter", emptyText: ""}),
      h("div", {class: "params"}, cards));
    return {
      exportCanvas: () => compose(exportList, {heading: `${app.layer.name}: parameters (${count(info.parameter_count)})`, cellPx: 320}),
      exportData: () => ({parameter_count: info.parameter_count, parameters: info.parameters, heads: info.heads,
                          weights: Object.fromEntries(Object.entries(weights).map(([k, v]) => [k, {shape: v.shape, data: nested(v.data, v.shape)}]))}),
    };
  });
  // a refusal (413 past the trace limit, ...) goes to render(), which shows it in the view and
  // clears the status line rather than saying the view was drawn
}

/** The count table, its formula, and the two answers. */
function countSection(app, info) {
  const c = info.config, E = c.embed_dim, H = c.num_heads, hd = info.head_dim ?? E / H;
  const kvGroup = H / (c.num_kv_heads ?? H); /* query heads per kv head (1: no grouping) */
  const {plain} = symbols(info);
  const rows = info.parameters.map((p) => ({p, sym: symbolic(info, p)}));
  const total = info.parameters.reduce((a, p) => a + p.count, 0);
  const formula = rows.every((r) => r.sym) ? rows.map((r) => r.sym).join(" + ") : null;
  const hFree = formula && !/H/.test(formula);
  return h("section", {class: "count-section"},
    h("table", {class: "count"},
      h("thead", {}, h("tr", {}, h("th", {}, "parameter"), h("th", {}, "shape"), h("th", {}, "as a formula"), h("th", {}, "count"))),
      h("tbody", {}, rows.map(({p, sym}) => h("tr", {},
        h("td", {class: "mono"}, p.name), h("td", {class: "mono"}, shapeText(p.shape)), h("td", {class: "mono"}, sym ?? "—"), h("td", {class: "num"}, count(p.count))))),
      h("tfoot", {}, h("tr", {}, h("th", {}, "total"), h("td"), h("td"), h("td", {class: "num", dataset: {total: String(info.parameter_count)}}, count(info.parameter_count))))),
    formula ? h("p", {}, h("span", {class: "formula"}, `${formula} = ${count(total)}  (E=${E}${c.kdim !== E ? `, kdim=${c.kdim}` : ""}${c.vdim !== E ? `, vdim=${c.vdim}` : ""})`)) : null,
    h("div", {class: "answer"},
      h("p", {}, h("b", {}, "Where does the split into heads happen? "),
        (kvGroup > 1
          ? `After the projection. The in-projection is one matrix for all heads; head h then owns rows [h·${hd}, (h+1)·${hd}) ` +
            `of its q part and columns [h·${hd}, (h+1)·${hd}) of out_proj.weight, and shares its k and v rows with the ` +
            `${kvGroup} query heads of its kv head g = ⌊h/${kvGroup}⌋: rows [g·${hd}, (g+1)·${hd}) of each of the k and v parts ` +
            "(grouped-query attention; outlined in their colours below). "
          : `After the projection. The in-projection is one matrix for all heads; head h then owns rows [h·${hd}, (h+1)·${hd}) ` +
            `of each of its q, k and v parts (outlined in its colour below) and columns [h·${hd}, (h+1)·${hd}) of out_proj.weight. `) +
        "The Trace view shows the reshape on real numbers (q_proj → q_heads)."),
      h("p", {}, h("b", {}, "Does H change the parameter count? "),
        hFree && plain
          ? `No: with head_dim = E/H, H appears in no shape — ${count(total)} parameters for every H that divides ${E}. ` +
            "H only changes how the rows are grouped. (Compare heads serves these very weights with another H.)"
          : `Here it does: this layer's head_dim (${hd}) or grouped kv heads make shapes depend on H${formula ? ` (${formula})` : ""}.`)));
}
