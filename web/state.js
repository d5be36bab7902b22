// state.js - what the page shows, kept in the URL's query so that a shared link reproduces it.
//
//   /ui?layer=demo&view=trace&q=the+cat+sat&causal=1&pad=2&qi=1&kj=0
//
// Only values that differ from the defaults are written; anything malformed in a link falls back
// to its default instead of failing (a link is user input).

import {parseRange} from "./deepzoom.js";

export const VIEWS = ["heads", "lines", "topk", "trace", "params", "compare"];
export const MAX_GENERATED = 16384;
export const DEFAULT_TEXT = "the cat sat on the mat because it was tired";

export const DEFAULTS = Object.freeze({
  layer: "",
  view: "heads",
  q: DEFAULT_TEXT, // query tokens
  k: "", // key/value tokens; empty: self-attention
  seed: 0,
  scale: 1,
  pos: true, // add sinusoidal positions to the token vectors
  causal: null, // null: the layer's own default (config.is_causal, else off)
  pad: [], // padded (masked) key indices
  head: null, // the enlarged map: a head index, "mean", or null
  qi: 0, // the neuron view's query ...
  kj: 0, // ... and key
  heads: null, // heads drawn in the line view (null: all)
  cmp: null, // the other num_heads of the comparison (null: chosen from the layer)
  cmap: "viridis",
  log: false, // attention weights on a logarithmic colour scale (LOG_DECADES below the top)
  vmax: "auto", // colour scale top: "auto" (largest weight of the map), "view" (... of the zoomed window) or "1"
  rpos: 0, // first query position, for layers with rotary embeddings
  gen: 0, // generated query tokens (0: the typed ones)
  zq: null, // a long input's map: the window's queries [start, stop) (null: all) ...
  zk: null, // ... and keys
  pop: "max", // how a pooled map's cell sums up its block: "max" or "mean"
  topk: 8, // the top-k view's k ...
  tq: null, // ... and its first query listed (null: the window's first)
});

const int = (v, lo = 0, hi = 1 << 30) => {
  if (!/^\d+$/.test(v)) return undefined;
  const n = Number(v);
  return n >= lo && n <= hi ? n : undefined;
};
const list = (v) => {
  if (v === "") return [];
  const parts = v.split(",").map((x) => int(x));
  return parts.every((x) => x !== undefined) ? [...new Set(parts)].sort((a, b) => a - b) : undefined;
};

const PARSE = {
  layer: (v) => (/^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$/.test(v) ? v : undefined),
  view: (v) => (VIEWS.includes(v) ? v : undefined),
  q: (v) => v,
  k: (v) => v,
  seed: (v) => int(v, 0, 0xffffffff),
  scale: (v) => {
    const n = Number(v);
    return v !== "" && Number.isFinite(n) && n > 0 && n <= 1000 ? n : undefined;
  },
  pos: (v) => (v === "1" ? true : v === "0" ? false : undefined),
  causal: (v) => (v === "1" ? true : v === "0" ? false : undefined),
  pad: list,
  head: (v) => (v === "mean" ? "mean" : int(v)),
  qi: (v) => int(v),
  kj: (v) => int(v),
  heads: list,
  cmp: (v) => int(v, 1),
  cmap: (v) => (["viridis", "cividis"].includes(v) ? v : undefined),
  log: (v) => (v === "1" ? true : v === "0" ? false : undefined),
  vmax: (v) => (v === "auto" || v === "1" || v === "view" ? v : undefined),
  rpos: (v) => int(v),
  gen: (v) => int(v, 1, MAX_GENERATED),
  zq: (v) => parseRange(v) ?? undefined,
  zk: (v) => parseRange(v) ?? undefined,
  pop: (v) => (v === "max" || v === "mean" ? v : undefined),
  topk: (v) => int(v, 1, 64),
  tq: (v) => int(v),
};

/** The state of a query string (or URLSearchParams): DEFAULTS overridden by what parses. */
export function parseState(search) {
  const p = search instanceof URLSearchParams ? search : new URLSearchParams(search);
  const s = {...DEFAULTS, pad: [], heads: null, zq: null, zk: null};
  for (const [key, parse] of Object.entries(PARSE)) {
    if (!p.has(key)) continue;
    const v = parse(p.get(key));
    if (v !== undefined) s[key] = v;
  }
  return s;
}

function same(a, b) {
  return Array.isArray(a) || Array.isArray(b) ? JSON.stringify(a) === JSON.stringify(b) : a === b;
}

/** The query string of a state: its non-default values, in a fixed order ("" when all default). */
export function stateQuery(s) {
  const p = new URLSearchParams();
  for (const key of Object.keys(PARSE)) {
    const v = s[key];
    if (v === undefined || same(v, DEFAULTS[key])) continue;
    if (v === null) continue;
    p.set(key, key === "zq" || key === "zk" ? `${v[0]}:${v[1]}` : Array.isArray(v) ? v.join(",") : typeof v === "boolean" ? (v ? "1" : "0") : String(v));
  }
  return p.toString();
}
