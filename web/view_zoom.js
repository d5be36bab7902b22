// view_zoom.js - the Heads view of an input past the drawing limit: every head's map and their
// mean, pooled to fit (each drawn cell the max or mean of a block of weights), and one map
// enlarged that zooms like a map service: drag a rectangle, turn the wheel, or press + and -, and
// only that window is asked for (weights_select), at the pooling the canvas needs, down to single
// cells. One colour scale throughout: 0 to the largest weight of the whole map (or 1).
//
// Testing contract, as the small maps': canvases carry data-head="0".."H-1" / "mean", the
// enlarged one data-zoom="1"; canvas pixel (x, y) is drawn cell (row y, column x). Every map
// canvas also carries what it shows: data-queries="q0:q1", data-keys="k0:k1", data-pool="a,b"
// and data-pool-op; the legend carries data-top (the scale's top).

import {h, hideTip} from "./dom.js";
import {f32, short, count} from "./format.js";
import {paint, mapView, legend} from "./heatmap.js";
import {compose, nested} from "./export.js";
import {clampWindow, isWhole, poolFor, pooledShape, blockOf, windowOfCells, zoomAt, pan, emptyBlocks, rangeText} from "./deepzoom.js";

export const THUMB_CELLS = 128; // drawn cells a side of the small maps
export const ZOOM_CELLS = 512; // ... and of the enlarged one

/** The selection of the small maps of a window: {queries, keys, pool, poolOp} (cache keys follow this order). */
export function thumbSelect(win, op) {
  return {queries: win.q, keys: win.k, pool: poolFor(win, THUMB_CELLS), poolOp: op};
}

/** The small maps of the whole map, each cell the max of its block: what the page asks first. */
export function overviewSelect(app) {
  const {L, S} = app.input;
  return thumbSelect({q: [0, L], k: [0, S]}, "max");
}

/** The window the state asks for, inside the map. */
export function currentWindow(app) {
  const {L, S} = app.input, s = app.state;
  return clampWindow({q: s.zq || [0, L], k: s.zk || [0, S]}, L, S);
}

/** The state's zoom members for a window (null for an axis shown whole: short links). */
export function windowState(app, win) {
  const {L, S} = app.input;
  return {zq: win.q[0] === 0 && win.q[1] === L ? null : win.q, zk: win.k[0] === 0 && win.k[1] === S ? null : win.k};
}

/** Moves the view to a window (a new history entry: Back returns to the previous one). */
export function showWindow(app, win) {
  app.setState({...windowState(app, win), tq: null}, {push: true});
}

function blockText(app, title, win, pool, r, c, v) {
  const {qLabels, kLabels} = app.input, b = blockOf(win, pool, r, c);
  if (b.q[1] - b.q[0] === 1 && b.k[1] - b.k[0] === 1)
    return `${title} · query ${b.q[0]} "${qLabels[b.q[0]] ?? b.q[0]}" → key ${b.k[0]} "${kLabels[b.k[0]] ?? b.k[0]}"\nweight ${f32(v)}`;
  const n = (b.q[1] - b.q[0]) * (b.k[1] - b.k[0]);
  return `${title} · queries ${b.q[0]}–${b.q[1] - 1} × keys ${b.k[0]}–${b.k[1] - 1}\n` +
         `${app.state.pop} of ${count(n)} weights ${f32(v)}`;
}

/** What the maps of a window show, in words. */
function poolText(pool, op) {
  return pool[0] === 1 && pool[1] === 1 ? "single weights" : `the ${op} of each ${pool[0]} × ${pool[1]} block of weights`;
}

/** Whether most of data's cells are below a fiftieth of top (its median, from a sample). */
function faint(data, top) {
  const step = Math.max(1, Math.floor(data.length / 2048)), sample = [];
  for (let i = 0; i < data.length; i += step) if (data[i] > 0) sample.push(data[i]);
  if (sample.length < 16) return false;
  sample.sort((a, b) => a - b);
  return sample[sample.length >> 1] < top / 50;
}

export function renderZoom(app, root) {
  const {H, L, S, S0, causal, pad, window, qoff, koff} = app.input;
  const s = app.state, op = s.pop, cmap = s.cmap;
  const win = currentWindow(app);
  const head = s.head === "mean" || (Number.isInteger(s.head) && s.head < H) ? s.head : "mean";
  const poolT = poolFor(win, THUMB_CELLS), poolZ = poolFor(win, ZOOM_CELLS);
  const whole = {q: [0, L], k: [0, S]}, poolW = poolFor(whole, THUMB_CELLS);
  const t0 = performance.now();
  if (!root.querySelector("[data-zoom]")) root.replaceChildren(h("p", {class: "muted"}, "asking for the pooled maps…"));
  else root.querySelector(".zoom-status")?.replaceChildren("loading…");

  return Promise.all([
    app.mapTop(),
    app.select(thumbSelect(win, op)), // every head, small
    app.select(thumbSelect(win, op), {average: true}), // their mean, small
    head === "mean" ? app.select({queries: win.q, keys: win.k, pool: poolZ, poolOp: op}, {average: true}) // the enlarged map
      : app.select({heads: [head], queries: win.q, keys: win.k, pool: poolZ, poolOp: op}),
    isWhole(win, L, S) ? null : app.select(thumbSelect(whole, op), {average: true}).catch(() => null), // the locator: the mean of the whole map
  ]).then(([top, heads, mean, big, overview]) => {
    if (root.dataset.view !== "heads") return null;
    app.result.ms = performance.now() - t0;
    const hw = heads.attnWeights, mw = mean.attnWeights, bw = big.attnWeights;
    const [rT, cT] = pooledShape(win, poolT), [rZ, cZ] = pooledShape(win, poolZ);
    const got = (w, n) => w.data.length === n;
    if (!got(hw, H * rT * cT) || !got(mw, rT * cT) || !got(bw, rZ * cZ))
      throw new Error(`the daemon's pooled maps have shapes [${hw.shape}], [${mw.shape}], [${bw.shape}]; expected [${H}, ${rT}, ${cT}] and [${rZ}, ${cZ}]`);
    if (s.vmax === "view") { // the scale follows the window: brighter, but not comparable across zoom steps
      top = 0;
      for (const w of [hw, mw, bw]) for (const v of w.data) if (v > top) top = v;
      top = top > 0 ? top : 1;
    }
    const marks = {causal, pad, S0, window, qoff, koff};
    const emptyT = emptyBlocks(win, poolT, marks), emptyZ = emptyBlocks(win, poolZ, marks);
    const what = (pool) => ({queries: rangeText(win.q), keys: rangeText(win.k), pool: pool.join(","), poolOp: op});
    const readout = h("div", {class: "readout", "aria-live": "polite"});
    const thumbs = [];

    const card = (which) => {
      const isMean = which === "mean";
      const data = isMean ? mw.data : hw.data, off = isMean ? 0 : which * rT * cT;
      const title = isMean ? "mean of heads" : `head ${which}`;
      const mv = mapView({
        rows: rT, cols: cT, maxPx: H > 8 ? 150 : 200, maxCell: 24, label: `attention weights, ${title}, ${poolText(poolT, op)}`,
        canvasProps: {dataset: {head: String(which), ...what(poolT)}},
        describe: (r, c) => blockText(app, title, win, poolT, r, c, data[off + r * cT + c]),
        onCursor: (r, c, text) => (readout.textContent = text.replace("\n", " · ")),
        activate: () => app.setState({head: which}),
      });
      paint(mv.canvas, data, {offset: off, rows: rT, cols: cT, lo: 0, hi: top, cmap, empty: emptyT, log: s.log});
      thumbs.push({title, canvas: mv.canvas});
      const selected = head === which;
      return h("div", {class: `map-card${selected ? " selected" : ""}`},
        h("button", {type: "button", class: "title", "aria-pressed": String(selected), title: "enlarge",
                     onclick: () => app.setState({head: which})}, title), mv.el);
    };
    const cards = [...Array(H).keys()].map(card);
    cards.push(card("mean"));

    const enlarged = zoomMap(app, {head, win, pool: poolZ, rows: rZ, cols: cZ, data: bw.data, top, empty: emptyZ, what: what(poolZ), readout});
    const locator = overview ? locatorMap(app, overview.attnWeights, whole, poolW, win, top) : null;
    const parts = [
      h("p", {class: "hint"}, `${count(L)} queries × ${count(S)} keys × ${H} heads: too many weights to send whole (${count(H * L * S)}), ` +
        "so each map shows the daemon's pooled weights (weights_select). Drag a rectangle on the large map, turn the wheel over it, or focus it and press + and − " +
        "(0: the whole map; Alt+arrows: move), down to single weights with their tokens."),
      h("div", {class: "zoom-bar"},
        h("label", {}, "each cell: ", h("select", {id: "pool-op", "aria-label": "pooling", onchange: (e) => app.setState({pop: e.target.value})},
          h("option", {value: "max", selected: op === "max"}, "max of its block"), h("option", {value: "mean", selected: op === "mean"}, "mean of its block"))),
        h("button", {type: "button", id: "zoom-in", title: "zoom in (+)", onclick: () => showWindow(app, zoomAt(win, L, S, 2))}, "+"),
        h("button", {type: "button", id: "zoom-out", title: "zoom out (−)", onclick: () => showWindow(app, zoomAt(win, L, S, 0.5))}, "−"),
        h("button", {type: "button", id: "zoom-whole", title: "the whole map (0)", disabled: isWhole(win, L, S), onclick: () => showWindow(app, whole)}, "whole map"),
        ["←", "↑", "↓", "→"].map((a, i) => h("button", {type: "button", title: "move (Alt+arrow)", "aria-label": `move ${["left", "up", "down", "right"][i]}`,
          onclick: () => showWindow(app, pan(win, L, S, [0, -0.5, 0.5, 0][i], [-0.5, 0, 0, 0.5][i]))}, a)),
        h("span", {class: "mono zoom-status", dataset: {window: `${rangeText(win.q)} ${rangeText(win.k)}`}},
          `queries ${win.q[0]}–${win.q[1] - 1} × keys ${win.k[0]}–${win.k[1] - 1}`)),
      legend(cmap, 0, top, {label: `${poolZ[0] * poolZ[1] === 1 && poolT[0] * poolT[1] === 1 ? "weight" : `${op} weight of a block`} (scale top: ${{1: "1", view: "the largest in view", auto: "the largest weight of the map"}[s.vmax]})`, emptyText: "masked", log: s.log}),
      h("div", {class: "maps"}, cards),
      readout,
      h("section", {class: "zoom-wrap"}, h("h3", {}, `${head === "mean" ? "mean of heads" : `head ${head}`}, enlarged: `,
        h("span", {class: "what"}, poolText(poolZ, op))), h("div", {class: "zoom-row"}, enlarged.el, locator)),
    ];
    parts[2].dataset.top = String(top);
    // a long input's weights sit far below the scale's top (a typical one is 1/S): on the linear
    // scale its maps look empty, and the log scale is what shows them
    if (!s.log && faint(bw.data, top))
      parts.splice(3, 0, h("p", {class: "hint scale-hint"}, "Most cells are far below the top of the colour scale, so they look dark. ",
        h("button", {type: "button", id: "use-log", onclick: () => app.setState({log: true})}, "Use the logarithmic scale")));
    hideTip(); // a tip over the map just replaced would stay
    root.replaceChildren(...parts);
    if (app.zoomFocus) enlarged.focusAt(app.zoomFocus);
    app.zoomFocus = null;
    return {
      exportCanvas: () => compose([...thumbs, {title: "enlarged", canvas: enlarged.canvas}], {heading: `${app.layer.name}: ${poolText(poolZ, op)}, queries ${rangeText(win.q)} × keys ${rangeText(win.k)}`}),
      exportData: () => ({window: {queries: win.q, keys: win.k}, pool_op: op,
                          heads: {pool: poolT, shape: [H, rT, cT], data: nested(hw.data, [H, rT, cT])},
                          mean: {pool: poolT, shape: [rT, cT], data: nested(mw.data, [rT, cT])},
                          enlarged: {head, pool: poolZ, shape: [rZ, cZ], data: nested(bw.data, [rZ, cZ])}}),
    };
  });
}

/** The enlarged map: drag a rectangle, wheel, + / − / 0, Alt+arrows; a click picks a query and key. */
function zoomMap(app, {head, win, pool, rows, cols, data, top, empty, what, readout}) {
  const {L, S, qLabels, kLabels} = app.input;
  const title = head === "mean" ? "mean of heads" : `head ${head}`;
  let dragged = false, cursor = [0, 0];
  const mv = mapView({
    rows, cols, maxPx: 640, maxCell: 64, label: `attention weights, ${title}, queries ${rangeText(win.q)}, keys ${rangeText(win.k)}, zoomable`,
    canvasProps: {dataset: {head: String(head), zoom: "1", ...what}},
    describe: (r, c) => blockText(app, title, win, pool, r, c, data[r * cols + c]),
    onCursor: (r, c, text) => {
      cursor = [r, c];
      readout.textContent = text.replace("\n", " · ");
    },
    activate: (r, c) => {
      if (dragged) return;
      const b = blockOf(win, pool, r, c);
      app.setState({qi: b.q[0], kj: b.k[0]});
      readout.textContent = `picked query ${b.q[0]} "${qLabels[b.q[0]]}", key ${b.k[0]} "${kLabels[b.k[0]]}" for the line, top-k and neuron views`;
    },
  });
  paint(mv.canvas, data, {rows, cols, lo: 0, hi: top, cmap: app.state.cmap, empty, log: app.state.log});
  const canvas = mv.canvas;
  const {qi, kj} = app.state;
  if (qi >= win.q[0] && qi < win.q[1] && kj >= win.k[0] && kj < win.k[1]) {
    const r = Math.floor((qi - win.q[0]) / pool[0]), c = Math.floor((kj - win.k[0]) / pool[1]);
    mv.box(r, c, r + 1, c + 1, "var(--accent)", "picked for the neuron view");
  }

  // the point under the pointer, in query and key coordinates (fractional)
  const at = (ev) => [win.q[0] + (ev.offsetY / canvas.clientHeight) * (win.q[1] - win.q[0]),
                      win.k[0] + (ev.offsetX / canvas.clientWidth) * (win.k[1] - win.k[0])];
  const cellOf = (ev) => [Math.min(rows - 1, Math.max(0, Math.floor((ev.offsetY / canvas.clientHeight) * rows))),
                          Math.min(cols - 1, Math.max(0, Math.floor((ev.offsetX / canvas.clientWidth) * cols)))];
  let start = null, band = null;
  canvas.addEventListener("mousedown", (ev) => {
    if (ev.button !== 0) return;
    start = cellOf(ev);
    dragged = false;
  });
  canvas.addEventListener("mousemove", (ev) => {
    if (!start) return;
    const [r, c] = cellOf(ev);
    if (!dragged && r === start[0] && c === start[1]) return;
    dragged = true;
    if (!band) band = mv.box(0, 0, 1, 1, "var(--focus)", "the window to zoom to");
    const [w, hgt] = mv.cssSize, sx = w / cols, sy = hgt / rows;
    Object.assign(band.style, {left: `${Math.min(c, start[1]) * sx}px`, top: `${Math.min(r, start[0]) * sy}px`,
                               width: `${(Math.abs(c - start[1]) + 1) * sx}px`, height: `${(Math.abs(r - start[0]) + 1) * sy}px`});
  });
  const finish = (ev) => {
    if (!start) return;
    const s0 = start;
    start = null;
    if (!dragged) return;
    const [r, c] = cellOf(ev);
    showWindow(app, clampWindow(windowOfCells(win, pool, s0[0], s0[1], r, c), L, S));
  };
  canvas.addEventListener("mouseup", finish);
  canvas.addEventListener("mouseleave", (ev) => start && dragged && finish(ev));
  let lastWheel = 0;
  canvas.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const now = performance.now();
    if (now - lastWheel < 250 || !ev.deltaY) return; // one step per gesture, not per event
    lastWheel = now;
    const [qc, kc] = at(ev);
    showWindow(app, zoomAt(win, L, S, ev.deltaY < 0 ? 2 : 0.5, qc, kc));
  }, {passive: false});

  canvas.addEventListener("keydown", (ev) => {
    const centre = () => {
      const b = blockOf(win, pool, cursor[0], cursor[1]);
      return [(b.q[0] + b.q[1]) / 2, (b.k[0] + b.k[1]) / 2];
    };
    const moves = {ArrowUp: [-0.5, 0], ArrowDown: [0.5, 0], ArrowLeft: [0, -0.5], ArrowRight: [0, 0.5]};
    let next = null, focusPoint = null;
    if (ev.key === "+" || ev.key === "=") {
      const [qc, kc] = centre();
      next = zoomAt(win, L, S, 2, qc, kc);
      focusPoint = [qc, kc];
    } else if (ev.key === "-" || ev.key === "_") {
      const [qc, kc] = centre();
      next = zoomAt(win, L, S, 0.5, qc, kc);
      focusPoint = [qc, kc];
    } else if (ev.key === "0") next = {q: [0, L], k: [0, S]};
    else if (ev.altKey && moves[ev.key]) next = pan(win, L, S, ...moves[ev.key]);
    if (!next) return;
    ev.preventDefault();
    app.zoomFocus = focusPoint || centre();
    showWindow(app, next);
  });

  const [w, hgt] = mv.cssSize;
  const cw = w / cols, ch = hgt / rows;
  const single = pool[0] === 1 && pool[1] === 1, showLabels = single && cw >= 9 && ch >= 9;
  const {S0, pad} = app.input;
  const klabels = h("div", {class: "klabels", style: {width: `${w}px`}}, showLabels ? kLabels.slice(win.k[0], win.k[1]).map((t, x) => {
    const j = win.k[0] + x;
    return j < S0 ? h("button", {type: "button", class: "klabel", style: {width: `${cw}px`}, "aria-pressed": String(pad.includes(j)),
                                 title: `key ${j} "${t}": click to ${pad.includes(j) ? "unmask" : "mask"} it`, onclick: () => app.togglePad(j)}, t)
      : h("span", {class: "klabel", style: {width: `${cw}px`}}, t);
  }) : null);
  const qlabels = h("div", {class: "qlabels", style: {height: `${hgt}px`}}, showLabels ? qLabels.slice(win.q[0], win.q[1]).map((t, i) =>
    h("div", {class: "qlabel", style: {height: `${ch}px`}, title: `query ${win.q[0] + i}`}, t)) : null);
  const axes = showLabels ? null : h("p", {class: "hint"}, `rows: queries ${win.q[0]}–${win.q[1] - 1}${pool[0] > 1 ? ` (${pool[0]} a row)` : ""}; ` +
    `columns: keys ${win.k[0]}–${win.k[1] - 1}${pool[1] > 1 ? ` (${pool[1]} a column)` : ""}. Zoom in for the tokens.`);
  const el = h("div", {}, axes, showLabels ? h("div", {class: "zoom"}, h("div"), klabels, qlabels, mv.el) : mv.el);
  return {
    el, canvas,
    /** Focus the map with its cursor on the cell holding the point (qc, kc). */
    focusAt([qc, kc]) {
      const r = Math.min(rows - 1, Math.max(0, Math.floor((qc - win.q[0]) / pool[0])));
      const c = Math.min(cols - 1, Math.max(0, Math.floor((kc - win.k[0]) / pool[1])));
      canvas.focus();
      mv.setCursor(r, c);
    },
  };
}

/** The whole map, small, with the window outlined; a click there centres the window on that point. */
function locatorMap(app, w, whole, pool, win, top) {
  const {L, S} = app.input;
  const [rows, cols] = pooledShape(whole, pool);
  if (w.data.length !== rows * cols) return null;
  const mv = mapView({
    rows, cols, maxPx: 160, maxCell: 8, label: "where the window is on the whole map (mean of heads)",
    canvasProps: {dataset: {locator: "1"}},
    describe: (r, c) => `the whole map: click to centre the window on queries ${r * pool[0]}, keys ${c * pool[1]}`,
    activate: (r, c) => {
      const spanQ = win.q[1] - win.q[0], spanK = win.k[1] - win.k[0];
      const q0 = Math.round((r + 0.5) * pool[0] - spanQ / 2), k0 = Math.round((c + 0.5) * pool[1] - spanK / 2);
      showWindow(app, clampWindow(pan({q: [q0, q0 + spanQ], k: [k0, k0 + spanK]}, L, S, 0, 0), L, S));
    },
  });
  paint(mv.canvas, w.data, {rows, cols, lo: 0, hi: top, cmap: app.state.cmap, log: app.state.log});
  mv.box(win.q[0] / pool[0], win.k[0] / pool[1], win.q[1] / pool[0], win.k[1] / pool[1], "var(--focus)", "the window shown");
  return h("div", {class: "locator"}, h("span", {class: "hint"}, "where you are"), mv.el);
}
