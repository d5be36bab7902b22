// app.js - the viewer: state (kept in the URL), the requests it makes through attnd.js, and the
// views it draws. Every number shown comes from the public /v1 API.

import {Client, AttndError} from "./attnd.js";
import {parseState, stateQuery, DEFAULTS, VIEWS, MAX_GENERATED} from "./state.js";
import {splitTokens, tokenInputs, parsePasted, squeeze, generateTokens} from "./tokens.js";
import {parseNpy} from "./npy.js";
import {headColours} from "./colormap.js";
import {count, bytesText} from "./format.js";
import {h, $, $$, focusKey, refocus} from "./dom.js";
import {download} from "./export.js";
import {initLayersPanel, renderLayerList, askKey} from "./layers.js";
import {renderHeads} from "./view_heads.js";
import {renderLines, MAX_LINE_TOKENS} from "./view_lines.js";
import {renderTrace} from "./view_trace.js";
import {renderParams} from "./view_params.js";
import {renderCompare} from "./view_compare.js";
import {renderZoom, currentWindow, overviewSelect} from "./view_zoom.js";
import {renderTopk} from "./view_topk.js";

// Past this many per-head weights (H * L * S) of one pass, the maps are not asked for whole: the
// views ask the daemon for the part they draw (weights_select: a pooled overview, a zoomed window).
export const MAX_WEIGHTS_DRAWN = 1 << 24;
export const MAX_TRACE_ASKED = 1 << 25; // numbers in a trace (the daemon has its own limit too)
const MAX_TRACE_WEIGHTS = 1 << 21; // scores and weights a long input's trace asks for (each)

const RENDER = {heads: renderHeads, lines: renderLines, topk: renderTopk, trace: renderTrace, params: renderParams, compare: renderCompare};
// A long input (app.result.big): the views that draw whole maps draw the window instead, or say why not.
const RENDER_BIG = {...RENDER, heads: renderZoom, lines: renderLinesWindow, compare: renderCompareBig};
// State members that change the request (the others only change the drawing).
const INPUT_KEYS = ["layer", "q", "k", "seed", "scale", "pos", "causal", "pad", "rpos", "gen"];

const params = new URLSearchParams(location.search);
// the address's ?layer= as given (state.js drops one that is no layer name; the first load says so)
let askedLayer = params.get("layer");

// The daemon: the one that served the page, or (for development, web/ served elsewhere) ?api=URL.
// The API key is kept per daemon origin, so a link naming another daemon never receives a key
// typed for this one (and /ui's Content-Security-Policy keeps the page on its own origin anyway).
const apiBase = params.get("api") || undefined;
const apiOrigin = apiBase ? new URL(apiBase, location.href).origin : location.origin;
const KEY_ITEM = `attnd.apiKey ${apiOrigin}`;

const app = {
  // a busy daemon answers 503 + Retry-After (long inputs' passes queue up): the page waits and asks again
  client: new Client(apiBase, {apiKey: sessionStorage.getItem(KEY_ITEM), retries: 8}),
  apiOrigin,
  state: parseState(location.search),
  layers: [], // GET /v1/layers
  layer: null, // {name, info: describe's answer, cfg}
  custom: null, // a pasted or .npy input: {query, key?, value?}, not in the URL
  input: null, // {request, qLabels, kLabels, L, S, H, empty}
  result: null, // {weights [H,L,S], mean [L,S], output, ms}
  view: null, // what the current view's render returned: {exportCanvas, exportData}
  generation: 0,
  cache: new Map(), // trace / weights promises, by what they depend on
};
window.attndViewer = app; // for the browser tests and for curious users in the console

// ---------------------------------------------------------------------------------------------
// Messages

function message(text) {
  const m = $("#message");
  m.textContent = text || "";
  m.hidden = !text;
}

function status(text) {
  $("#status").textContent = text || "";
}

/** Text of an error for the page: the API's code, message and field, and what to do about 413. */
function errorText(e) {
  if (!(e instanceof AttndError)) return String(e && e.message ? e.message : e);
  let t = `${e.status ? `HTTP ${e.status} ` : ""}${e.code}: ${e.message}`;
  if (e.field) t += ` (field ${e.field})`;
  if (e.status === 413) t += "\nThe request is too large for this daemon: shorten the input, or raise the daemon's limit.";
  return t;
}

/** A confirmation that stays a few seconds (layer created, link copied, ...). */
let noticeTimer = null;
function notice(text) {
  const n = $("#notice");
  n.textContent = text;
  n.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => (n.hidden = true), 8000);
}

app.message = message;
app.notice = notice;
app.status = status;
app.errorText = errorText;

// ---------------------------------------------------------------------------------------------
// Requests, with the API key asked for when the daemon wants one

app.call = async function call(fn) {
  for (;;) {
    try {
      return await fn(app.client);
    } catch (e) {
      if (e instanceof AttndError && e.status === 401) {
        const given = await askKey(app, e.message);
        if (given) continue;
      }
      throw e;
    }
  }
};

app.setKey = function setKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
  app.client.apiKey = key || null;
  $("#key-button").textContent = key ? "API key ✓" : "API key";
};

// ---------------------------------------------------------------------------------------------
// State and URL

/** The page's URL for a state (the development ?api= kept). */
function urlFor(state) {
  const q = new URLSearchParams(stateQuery(state));
  if (apiBase) q.set("api", apiBase);
  const text = q.toString();
  return location.pathname + (text ? `?${text}` : "");
}

/** Redraws, reruns or reloads as much as the change from before to app.state needs. */
function follow(before) {
  const changed = Object.keys(app.state).filter((k) => JSON.stringify(before[k]) !== JSON.stringify(app.state[k]));
  if (!changed.length) return;
  syncControls();
  if (changed.includes("layer")) loadLayer();
  else if (changed.some((k) => INPUT_KEYS.includes(k))) schedule();
  else render();
}

/** Changes the state; the URL follows (replaced, or pushed for a new layer or view). */
app.setState = function setState(patch, {push = false} = {}) {
  const before = app.state;
  app.state = {...before, ...patch};
  const url = urlFor(app.state);
  if (url !== location.pathname + location.search) history[push ? "pushState" : "replaceState"](null, "", url);
  follow(before);
};

window.addEventListener("popstate", () => {
  const before = app.state;
  app.state = parseState(location.search);
  follow(before);
});

// ---------------------------------------------------------------------------------------------
// The input: tokens (or a pasted tensor) to the request's tensors, labels and masks


/** Whether tensors a and b ({data, shape}) are equal in shape and every value (bits aside: as
 * float32, which is what the page sends). */
function sameTensor(a, b) {
  if (a.shape.length !== b.shape.length || a.shape.some((n, d) => n !== b.shape[d])) return false;
  for (let i = 0; i < a.data.length; i++) if (!Object.is(a.data[i], b.data[i])) return false;
  return true;
}

function buildInput() {
  const s = app.state, info = app.layer.info, cfg = app.layer.cfg;
  let query, key, value, qLabels, kLabels;
  if (app.custom) {
    ({query, key, value} = app.custom);
    qLabels = Array.from({length: query.shape[0]}, (_, i) => String(i));
    kLabels = key ? Array.from({length: key.shape[0]}, (_, i) => String(i)) : qLabels;
  } else {
    const qt = s.gen ? generateTokens(s.gen, s.seed) : splitTokens(s.q), kt = splitTokens(s.k);
    if (!qt.length) throw new Error("type at least one query token");
    const t = tokenInputs(cfg, qt, kt, {seed: s.seed, scale: s.scale, positions: s.pos});
    ({query, key, value} = t);
    qLabels = qt;
    kLabels = t.keyTokens;
  }
  const L = query.shape[0], S0 = kLabels.length;
  const extra = [];
  if (cfg.add_bias_kv) extra.push("⟨bias_k⟩");
  if (cfg.add_zero_attn) extra.push("⟨zero⟩");
  const S = S0 + extra.length;
  const H = cfg.num_heads;
  const causal = s.causal ?? !!cfg.is_causal;
  const pad = s.pad.filter((j) => j < S0);

  const request = {query, isCausal: causal};
  if (key) request.key = key;
  if (value) request.value = value;
  if (pad.length) {
    const m = new Uint8Array(S0);
    for (const j of pad) m[j] = 1;
    request.keyPaddingMask = {data: m, shape: [S0], dtype: "bool"};
  }
  if (cfg.rope) request.positions = Array.from({length: L}, (_, i) => s.rpos + i);
  // positions, for the masks drawn (masks.js): the queries' as sent; keys at the query positions in
  // self-attention (no key sent, or one equal to the query), else at 0..S0-1
  const qoff = cfg.rope ? s.rpos : 0;
  const koff = !key || sameTensor(key, query) ? qoff : 0;

  return {request, qLabels, kLabels: kLabels.concat(extra), L, S, S0, H, causal, pad, info,
          window: cfg.window ?? null, qoff, koff};
}

// ---------------------------------------------------------------------------------------------
// Loading a layer, running the pass, drawing

async function refreshLayers() {
  app.layers = await app.call((c) => c.list());
  renderLayerList(app);
  return app.layers;
}
app.refreshLayers = refreshLayers;

async function loadLayer() {
  const gen = ++app.generation;
  app.layer = null;
  app.result = null;
  app.custom = null;
  setInputMode("words");
  message("");
  try {
    if (!app.layers.length) await refreshLayers();
    let name = app.state.layer;
    // a ?layer= that is no layer name was dropped when the URL was read (state.js): say so
    const dropped = !name && askedLayer ? askedLayer : null;
    askedLayer = null;
    if (!name) {
      if (!app.layers.length) {
        status("");
        $("#view").replaceChildren(h("p", {}, "No layers yet: create one on the left (or start attnd with --demo)."));
        return;
      }
      name = (app.layers.find((l) => l.name === "demo") || app.layers[0]).name;
      app.state = {...app.state, layer: name};
      history.replaceState(null, "", urlFor(app.state));
    }
    const info = await app.call((c) => c.describe(name));
    if (gen !== app.generation) return;
    app.layer = {name, info, cfg: info.config};
    renderLayerList(app);
    renderLayerSummary();
    renderLayerOptions();
    syncControls();
    await run();
    if (dropped)
      notice(`"${dropped.slice(0, 80)}" (from the address) is not a layer name (1–64 of A–Z a–z 0–9 . _ -, ` +
              `not starting with "."): showing "${name}" instead.`);
  } catch (e) {
    if (gen !== app.generation) return;
    if (e instanceof AttndError && e.status === 404) {
      message(`There is no layer "${app.state.layer}" on this daemon (${e.message}). Pick one on the left.`);
      $("#view").replaceChildren();
    } else message(errorText(e));
  }
}
app.loadLayer = loadLayer;

/** What the request depends on, as text (for caches). */
function inputKey() {
  return JSON.stringify(INPUT_KEYS.map((k) => app.state[k])) + (app.custom ? `:custom${app.custom.id}` : "");
}
app.inputKey = inputKey;

let customCount = 0;
let timer = null;
function schedule() {
  clearTimeout(timer);
  timer = setTimeout(run, 120);
}
app.rerun = schedule;

/** The forward pass twice at once: per-head weights and their mean (both as the API gives them). */
async function run() {
  if (!app.layer) return;
  const gen = ++app.generation;
  let input;
  try {
    input = buildInput();
  } catch (e) {
    message(e.message);
    return;
  }
  app.input = input;
  renderPadChips();
  if (app.state.gen && !app.custom && $("#q-text") !== document.activeElement) $("#q-text").value = input.qLabels.join(" ");
  const {H, L, S} = input;
  const t0 = performance.now();
  if (H * L * S > MAX_WEIGHTS_DRAWN) {
    // too many to send whole: the views ask for pooled maps and windows. The first request (the
    // largest weight of each head: the colour scale) also tells whether the daemon can choose.
    status("computing the largest weights…");
    try {
      await app.mapTop(true);
      if (gen !== app.generation) return;
      app.result = {big: true, ms: performance.now() - t0};
      message("");
      render();
    } catch (e) {
      if (gen !== app.generation) return;
      app.result = null;
      status("");
      const old = e instanceof AttndError && e.code === "unknown_field" && e.field === "weights_select";
      message(`Too large to draw here: ${H} heads × ${L} queries × ${S} keys = ${count(H * L * S)} weights ` +
              `(${bytesText(4 * H * L * S)}), past this page's limit of ${count(MAX_WEIGHTS_DRAWN)}` +
              (old ? ", and this daemon cannot return a part of them (it has no weights_select). Shorten the input." : `.\n${errorText(e)}`));
      $("#view").replaceChildren();
    }
    return;
  }
  status("computing…");
  try {
    const [perHead, avg, now] = await Promise.all([
      app.call((c) => c.forward(app.layer.name, {...input.request, needWeights: true, averageAttnWeights: false})),
      app.call((c) => c.forward(app.layer.name, {...input.request, needWeights: true, averageAttnWeights: true})),
      app.call((c) => c.describe(app.layer.name)).catch(() => null), // replaced meanwhile? (below)
    ]);
    if (gen !== app.generation) return;
    if (now && now.version !== app.layer.info.version) {
      // replaced on the daemon since the page read it: new parameters are drawn as they are; a
      // new config is a new layer for the page (its inputs, its summary)
      const was = app.layer.info.version;
      if (JSON.stringify(now.config) !== JSON.stringify(app.layer.cfg)) {
        refreshLayers().catch(() => null);
        await loadLayer();
        notice(`The layer "${now.name}" was replaced on the daemon (version ${was} → ${now.version}): read it again.`);
        return;
      }
      app.layer = {...app.layer, info: now, cfg: now.config};
      renderLayerSummary();
      notice(`The layer "${now.name}" has new parameters on the daemon (version ${was} → ${now.version}).`);
    }
    const w = perHead.attnWeights;
    // the daemon's shapes are the truth: [H, L, S] for an unbatched request
    const shape = w.shape.length === 4 ? w.shape.slice(1) : w.shape;
    app.result = {weights: {data: w.data, shape}, mean: {data: avg.attnWeights.data, shape: shape.slice(1)},
                  output: perHead.output, ms: performance.now() - t0};
    if (shape[0] !== H || shape[1] !== L || shape[2] !== S) {
      input.H = shape[0];
      input.S = shape[2];
    }
    message("");
    render();
  } catch (e) {
    if (gen !== app.generation) return;
    if (await layerChanged(e)) return;
    app.result = null;
    status("");
    message(errorText(e));
    $("#view").replaceChildren();
  }
}

/** After a pass failed with e: when the layer was deleted or replaced on the daemon meanwhile (by
 * another tab, client or replica; a 404, or a 400 for inputs made for its old config), says so and
 * reads it again, or the list without it. True when it did. */
async function layerChanged(e) {
  if (!(e instanceof AttndError) || !app.layer) return false;
  if (e.status === 404 && e.code === "layer_not_found") {
    const name = app.layer.name;
    await refreshLayers().catch(() => null);
    app.layer = null;
    app.result = null;
    status("");
    $("#view").replaceChildren();
    message(`The layer "${name}" was deleted on the daemon. Pick another on the left.`);
    return true;
  }
  if (e.status !== 400) return false;
  const was = app.layer.info.version;
  const info = await app.call((c) => c.describe(app.layer.name)).catch(() => null);
  if (!info || info.version === was) return false;
  refreshLayers().catch(() => null);
  await loadLayer();
  app.notice(`The layer "${app.layer ? app.layer.name : ""}" was replaced on the daemon (version ${was} → ${info.version}): read it again.`);
  return true;
}

/** Draws the current view (no request unless the view needs its own: trace, parameters, compare). */
function render() {
  const s = app.state;
  for (const b of $$(".tabs button")) {
    const sel = b.dataset.view === s.view;
    b.setAttribute("aria-selected", String(sel));
    b.tabIndex = sel ? 0 : -1;
  }
  const root = $("#view");
  if (!app.layer || !app.result) return;
  const t0 = performance.now();
  const focus = focusKey(root); // kept across the rebuild (Enter on a map, a cell, a score)
  root.setAttribute("aria-labelledby", `tab-${s.view}`);
  root.dataset.view = s.view;
  const out = (app.result.big ? RENDER_BIG : RENDER)[s.view](app, root);
  const {H, L, S} = app.input;
  const done = (view) => {
    refocus(root, focus);
    app.lastDrawMs = performance.now() - t0;
    app.view = view || null;
    status(`${app.layer.name}: ${H} heads × ${L} queries × ${S} keys · forward ${Math.round(app.result.ms)} ms · drawn in ${Math.round(app.lastDrawMs)} ms`);
  };
  if (out && typeof out.then === "function") { // views that make their own requests (trace, parameters, compare)
    app.view = null;
    status(`${app.layer.name}: ${H} heads × ${L} queries × ${S} keys · forward ${Math.round(app.result.ms)} ms · loading…`);
    const gen = app.generation, drawing = ++app.drawing;
    out.then((v) => gen === app.generation && drawing === app.drawing && root.dataset.view === s.view && done(v), (e) => {
      if (gen !== app.generation || drawing !== app.drawing) return;
      status("");
      root.replaceChildren(h("p", {class: "message", role: "alert", dataset: {error: e.code || "error"}}, errorText(e)));
    });
  } else done(out);
}
app.render = render;
app.drawing = 0;

// ---------------------------------------------------------------------------------------------
// Long inputs: the parts of the map the views draw, asked for with weights_select

const SELECT_CACHED = 32;
const SELECT_AT_ONCE = 2; // passes asked at once: more would only wait in the daemon's queue (or get 503)
let selectRunning = 0;
const selectWaiting = [];

async function oneAtATime(fn) {
  if (selectRunning >= SELECT_AT_ONCE) await new Promise((resolve) => selectWaiting.push(resolve));
  selectRunning++;
  try {
    return await fn();
  } finally {
    selectRunning--;
    if (selectWaiting.length) selectWaiting.shift()();
  }
}

/**
 * The attention weights that sel chooses ({heads, queries, keys, topK, pool, poolOp}), for the
 * current input: {attnWeights?, attnTopk?} (cached by input and selection; the output is dropped).
 */
app.select = function select(sel, {average = false} = {}) {
  const key = `select:${app.layer.name}:${app.layer.info.version}:${inputKey()}:${average}:${JSON.stringify(sel)}`;
  let p = app.cache.get(key);
  if (p) { // most recently used last
    app.cache.delete(key);
    app.cache.set(key, p);
    return p;
  }
  const request = app.input.request, name = app.layer.name;
  p = oneAtATime(() => app.call((c) => c.forward(name, {...request, averageAttnWeights: average, weightsSelect: sel, needOutput: false})))
    .then((r) => ({attnWeights: r.attnWeights, attnTopk: r.attnTopk}));
  app.cache.set(key, p);
  p.catch(() => app.cache.delete(key));
  const selects = [...app.cache.keys()].filter((k) => k.startsWith("select:"));
  for (const k of selects.slice(0, Math.max(0, selects.length - SELECT_CACHED))) app.cache.delete(k);
  return p;
};

/**
 * The top of the colour scale for a long input's maps: 1, or the largest weight of the whole map,
 * so that zooming never changes the colours. It is the largest cell of the overview pooled by max
 * (every block's max: every weight), the small maps' first request, asked once.
 * measure: ask even when the scale is 1 (the first request of a long input).
 */
app.mapTop = async function mapTop(measure = false) {
  if (app.state.vmax === "1" && !measure) return 1;
  const r = await app.select(overviewSelect(app));
  if (app.state.vmax === "1") return 1;
  let hi = 0;
  for (const v of r.attnWeights.data) if (v > hi) hi = v;
  return hi > 0 ? hi : 1;
};

/** Lines of a long input: the window's weights, when the window is small enough to draw lines. */
function renderLinesWindow(app, root) {
  const win = currentWindow(app), {L, S} = app.input;
  const Lw = win.q[1] - win.q[0], Sw = win.k[1] - win.k[0];
  if (Lw > MAX_LINE_TOKENS || Sw > MAX_LINE_TOKENS) {
    const fit = {q: [win.q[0], win.q[0] + Math.min(Lw, 32)], k: [win.k[0], win.k[0] + Math.min(Sw, 32)]};
    root.replaceChildren(h("p", {class: "message"},
      `The line view draws up to ${MAX_LINE_TOKENS} tokens a side: it follows the window of the Heads map, now ${count(Lw)} queries × ${count(Sw)} keys ` +
      `of ${count(L)} × ${count(S)}. Zoom the map in, or `,
      h("button", {type: "button", id: "lines-fit", onclick: () => app.setState({zq: fit.q, zk: fit.k}, {push: true})},
        `show queries ${fit.q[0]}–${fit.q[1] - 1} × keys ${fit.k[0]}–${fit.k[1] - 1}`), "."));
    return null;
  }
  return app.select({queries: win.q, keys: win.k}).then((r) => {
    if (root.dataset.view !== "lines") return null;
    const w = r.attnWeights, shape = w.shape.length === 4 ? w.shape.slice(1) : w.shape;
    const {qLabels, kLabels} = app.input;
    return renderLines(app, root, {weights: {data: w.data, shape}, qLabels: qLabels.slice(win.q[0], win.q[1]), kLabels: kLabels.slice(win.k[0], win.k[1]),
                                   first: [win.q[0], win.k[0]]});
  });
}

function renderCompareBig(app, root) {
  root.replaceChildren(h("p", {class: "message"}, `The comparison draws both layers' whole maps: ${count(app.input.L)} queries are past this page's drawing limit. Shorten the input.`));
  return null;
}

/**
 * The rows of a long input that the trace's scores and weights hold: the Heads map's window when
 * it is small enough, else the picked query's row of it. null: a short input (every row).
 */
app.traceWindow = function traceWindow() {
  if (!app.result || !app.result.big) return null;
  const win = currentWindow(app), {H} = app.input;
  if (H * (win.q[1] - win.q[0]) * (win.k[1] - win.k[0]) <= MAX_TRACE_WEIGHTS) return win;
  const qi = Math.min(win.q[1] - 1, Math.max(win.q[0], app.state.qi));
  return {q: [qi, qi + 1], k: win.k};
};

/** A trace of the current input (cached until the input, or a long input's window, changes). */
app.trace = function trace() {
  const win = app.traceWindow();
  const key = `trace:${app.layer.name}:${app.layer.info.version}:${inputKey()}:${win ? JSON.stringify(win) : ""}`;
  if (!app.cache.has(key)) {
    const {H, L, S, info} = app.input;
    const E = info.config.embed_dim, hd = info.head_dim || E / H;
    const Lw = win ? win.q[1] - win.q[0] : L, Sw = win ? win.k[1] - win.k[0] : S;
    const estimate = 3 * L * E + 2 * S * E + 3 * L * H * hd + 2 * S * H * hd + 2 * H * Lw * Sw;
    if (estimate > MAX_TRACE_ASKED)
      return Promise.reject(new Error(`A trace of this input would hold about ${count(estimate)} numbers (${bytesText(4 * estimate)}): too large to draw here. Shorten the input.`));
    // per head: the trace's attn_weights follows average_attn_weights, as forward's does
    const select = win ? {weightsSelect: {queries: win.q, keys: win.k}} : {};
    app.cache.set(key, app.call((c) => c.trace(app.layer.name, {...app.input.request, averageAttnWeights: false, ...select})));
  }
  const p = app.cache.get(key);
  p.catch(() => app.cache.delete(key));
  return p;
};

/** The layer's parameters (cached per version). */
app.weights = function weights(name = app.layer.name, version = app.layer.info.version) {
  const key = `weights:${name}:${version}`;
  if (!app.cache.has(key)) app.cache.set(key, app.call((c) => c.weights(name)));
  const p = app.cache.get(key);
  p.catch(() => app.cache.delete(key));
  return p;
};

app.headColours = () => headColours(app.input ? app.input.H : 1);

// ---------------------------------------------------------------------------------------------
// Controls

function renderLayerSummary() {
  const {info} = app.layer, c = info.config;
  // the fields the line below does not already say, and only where they are not the defaults
  // (head_dim is said; num_kv_heads only when it groups the heads)
  const extras = Object.entries(c)
    .filter(([k, v]) => !["embed_dim", "num_heads", "kdim", "vdim", "bias", "batch_first", "dropout", "add_bias_kv", "add_zero_attn", "head_dim"].includes(k) &&
                        !(k === "num_kv_heads" && v === c.num_heads) && v != null && v !== false)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`);
  $("#layer-summary").title = $("#layer-summary").textContent =
    `E=${c.embed_dim} · H=${c.num_heads} · head_dim=${info.head_dim ?? c.embed_dim / c.num_heads}` +
    (c.kdim !== c.embed_dim || c.vdim !== c.embed_dim ? ` · kdim=${c.kdim} vdim=${c.vdim}` : "") +
    (c.add_bias_kv ? " · add_bias_kv" : "") + (c.add_zero_attn ? " · add_zero_attn" : "") +
    (extras.length ? ` · ${extras.join(" ")}` : "") +
    ` · ${count(info.parameter_count)} parameters · version ${info.version}`;
}

/** Options a request can set that only some layers have (rotary positions). */
function renderLayerOptions() {
  const box = $("#layer-options");
  box.replaceChildren();
  const cfg = app.layer.cfg;
  if (cfg.rope) {
    const input = h("input", {type: "number", min: "0", value: String(app.state.rpos), id: "rpos"});
    input.addEventListener("change", () => app.setState({rpos: Math.max(0, parseInt(input.value, 10) || 0)}));
    box.append(h("label", {}, "first query position (rotary) ", input));
  }
}

const MAX_CHIPS = 1024;

function renderPadChips() {
  const box = $("#pad-chips");
  const {kLabels, S0, pad} = app.input;
  const shown = Math.min(S0, MAX_CHIPS);
  const focus = focusKey(box);
  box.replaceChildren(...kLabels.slice(0, shown).map((w, j) =>
    h("button", {type: "button", class: "chip", "aria-pressed": String(pad.includes(j)), title: `key ${j}: click to ${pad.includes(j) ? "unmask" : "mask"}`,
                 onclick: () => app.togglePad(j)}, w)),
    S0 > shown ? h("span", {class: "hint"}, `… and ${count(S0 - shown)} more keys: mask those by their labels on the zoomed map`) : "");
  refocus(box, focus);
}

app.togglePad = function togglePad(j) {
  const pad = app.state.pad.includes(j) ? app.state.pad.filter((x) => x !== j) : [...app.state.pad, j].sort((a, b) => a - b);
  app.setState({pad});
};

function syncControls() {
  const s = app.state;
  if (!app.custom) {
    if ($("#q-text") !== document.activeElement && !s.gen) $("#q-text").value = s.q;
    $("#gen-note").textContent = s.gen ? `${count(s.gen)} generated tokens (seed ${s.seed}); typing replaces them` : "";
    /* the count field shows what is generated (?gen= from a link too), so pressing it again keeps it */
    if (s.gen && $("#gen-count") !== document.activeElement) $("#gen-count").value = String(s.gen);
    if ($("#k-text") !== document.activeElement) $("#k-text").value = s.k;
  }
  $("#seed").value = String(s.seed);
  $("#scale").value = String(s.scale);
  $("#pos").checked = s.pos;
  $("#causal").checked = s.causal ?? !!(app.layer && app.layer.cfg.is_causal);
  $("#cmap").value = s.cmap;
  $("#vmax").value = s.vmax;
  $("#log").value = s.log ? "1" : "0";
  const sel = $("#layer-select");
  if (sel.value !== s.layer) sel.value = s.layer;
}

function setInputMode(mode) {
  for (const r of $$('input[name="input-mode"]')) r.checked = r.value === mode;
  $("#words-input").hidden = mode !== "words";
  $("#custom-input").hidden = mode !== "custom";
}

function useCustom(parts) {
  const cfg = app.layer.cfg;
  const E = cfg.embed_dim;
  if (parts.query.shape[1] !== E) throw new Error(`the query has ${parts.query.shape[1]} features, the layer's embed_dim is ${E}`);
  app.custom = {query: parts.query, key: parts.key || app.custom?.key, value: parts.value || app.custom?.value, id: ++customCount};
  schedule();
}

function bindControls() {
  let typing = null;
  const onText = () => {
    clearTimeout(typing);
    typing = setTimeout(() => app.setState({q: $("#q-text").value, k: $("#k-text").value, pad: [], gen: 0, ...ZOOM_RESET}), 300);
  };
  $("#q-text").addEventListener("input", onText);
  $("#k-text").addEventListener("input", onText);
  $("#generate").addEventListener("click", () => {
    const n = Math.min(MAX_GENERATED, Math.max(1, parseInt($("#gen-count").value, 10) || 8192));
    app.setState({gen: n, pad: [], ...ZOOM_RESET}, {push: true});
  });
  $("#seed").addEventListener("change", (e) => app.setState({seed: Math.max(0, parseInt(e.target.value, 10) || 0)}));
  $("#scale").addEventListener("change", (e) => {
    const v = Number(e.target.value);
    app.setState({scale: v > 0 && v <= 1000 ? v : 1});
  });
  $("#pos").addEventListener("change", (e) => app.setState({pos: e.target.checked}));
  $("#causal").addEventListener("change", (e) => app.setState({causal: e.target.checked}));
  $("#cmap").addEventListener("change", (e) => app.setState({cmap: e.target.value}));
  $("#vmax").addEventListener("change", (e) => app.setState({vmax: e.target.value}));
  $("#log").addEventListener("change", (e) => app.setState({log: e.target.value === "1"}));
  $("#layer-select").addEventListener("change", (e) => app.setState({...resetFor(e.target.value)}, {push: true}));

  for (const r of $$('input[name="input-mode"]'))
    r.addEventListener("change", () => {
      setInputMode(r.value);
      if (r.value === "words" && app.custom) {
        app.custom = null;
        schedule();
      }
    });
  $("#json-apply").addEventListener("click", () => {
    try {
      useCustom(parsePasted($("#json-text").value));
      message("");
    } catch (e) {
      message(`The pasted input: ${e.message}`);
    }
  });
  const npy = (which) => async (ev) => {
    const f = ev.target.files[0];
    if (!f) return;
    try {
      const t = squeeze(parseNpy(await f.arrayBuffer()), f.name);
      useCustom(which === "query" ? {query: t} : {query: app.custom?.query || requireQuery(), key: t});
      message("");
    } catch (e) {
      message(`${f.name}: ${e.message}`);
    }
  };
  $("#npy-query").addEventListener("change", npy("query"));
  $("#npy-key").addEventListener("change", npy("key"));

  const tabs = $$(".tabs button");
  tabs.forEach((b, i) => {
    b.addEventListener("click", () => app.setState({view: b.dataset.view}, {push: true}));
    b.addEventListener("keydown", (ev) => { // arrow keys move along the tab list
      const d = ev.key === "ArrowRight" ? 1 : ev.key === "ArrowLeft" ? -1 : 0;
      if (!d) return;
      const next = tabs[(i + d + tabs.length) % tabs.length];
      next.focus();
      next.click();
    });
  });

  $("#export-png").addEventListener("click", exportPNG);
  $("#export-json").addEventListener("click", exportJSON);
  $("#copy-link").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(location.href);
      notice("link copied");
    } catch (e) {
      notice(`the link to this view: ${location.href}`);
    }
  });
  const themes = ["auto", "light", "dark"];
  const setTheme = (t) => {
    document.documentElement.dataset.theme = t;
    $("#theme-button").textContent = `Theme: ${t}`;
    localStorage.setItem("attnd.theme", t);
  };
  setTheme(themes.includes(localStorage.getItem("attnd.theme")) ? localStorage.getItem("attnd.theme") : "auto");
  $("#theme-button").addEventListener("click", () => {
    setTheme(themes[(themes.indexOf(document.documentElement.dataset.theme) + 1) % 3]);
    render(); // canvases drawn with theme colours
  });
}

function requireQuery() {
  const t = tokenInputs(app.layer.cfg, splitTokens(app.state.q), [], {seed: app.state.seed, scale: app.state.scale, positions: app.state.pos});
  return t.query;
}

const ZOOM_RESET = {zq: null, zk: null, tq: null};

/** The state for a newly chosen layer: same tokens and view, selections reset. */
function resetFor(layer) {
  return {layer, pad: [], head: null, qi: 0, kj: 0, heads: null, cmp: null, rpos: 0, ...ZOOM_RESET};
}
app.resetFor = resetFor;

// ---------------------------------------------------------------------------------------------
// Export

async function exportPNG() {
  if (!app.view || !app.view.exportCanvas) return notice("nothing to export yet");
  const canvas = await app.view.exportCanvas();
  canvas.toBlob((blob) => download(blob, `attnd-${app.layer.name}-${app.state.view}.png`), "image/png");
}

async function exportJSON() {
  if (!app.view || !app.view.exportData) return notice("nothing to export yet");
  const data = {layer: app.layer.name, version: app.layer.info.version, config: app.layer.cfg, view: app.state.view,
                link: location.href, input: {queries: app.input.qLabels, keys: app.input.kLabels, causal: app.input.causal, padded_keys: app.input.pad},
                ...(await app.view.exportData())};
  download(new Blob([JSON.stringify(data)], {type: "application/json"}), `attnd-${app.layer.name}-${app.state.view}.json`);
}

// ---------------------------------------------------------------------------------------------

async function start() {
  bindControls();
  initLayersPanel(app);
  app.setKey(sessionStorage.getItem(KEY_ITEM));
  if (apiOrigin !== location.origin) $("#layer-summary").before(h("span", {class: "muted", title: "this page talks to another daemon (?api=)"}, `daemon ${apiOrigin}`));
  if (!VIEWS.includes(app.state.view)) app.state.view = DEFAULTS.view;
  syncControls();
  try {
    await refreshLayers();
  } catch (e) {
    message(errorText(e));
    return;
  }
  await loadLayer();
}

start();

