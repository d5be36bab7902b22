// tokens.js - the page's inputs: words (or indices) turned into seeded vectors, and pasted tensors.
//
// A token's vector depends only on its text, the seed and the vector's size: the same word gives
// the same vector wherever it appears (so a repeated word attends the same way unless positions are
// added), and a shared link reproduces the same numbers. Entries are N(0, 1) draws from a
// SplitMix32 stream seeded by FNV-1a of the word, times `scale`.

export const MAX_TOKENS = 16384;

/** Tokens of a text: split at white space (at most MAX_TOKENS). */
export function splitTokens(text) {
  const t = String(text || "").trim();
  return t ? t.split(/\s+/).slice(0, MAX_TOKENS) : [];
}

function fnv1a(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** SplitMix32: a small generator with good statistics; returns uint32s. */
function splitmix32(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/**
 * The vector of one token: dim float32 values ~ N(0, scale²). stream separates the keys' and
 * values' vectors of one word when kdim and vdim differ.
 */
export function tokenVector(word, dim, seed = 0, scale = 1, stream = 0) {
  const next = splitmix32(fnv1a(`${stream}\u0000${seed}\u0000${word}`));
  const out = new Float32Array(dim);
  for (let i = 0; i < dim; i += 2) {
    // Box-Muller: two normals from two uniforms in (0, 1]
    const u1 = (next() + 1) / 4294967296, u2 = next() / 4294967296;
    const r = Math.sqrt(-2 * Math.log(u1)) * scale;
    out[i] = r * Math.cos(2 * Math.PI * u2);
    if (i + 1 < dim) out[i + 1] = r * Math.sin(2 * Math.PI * u2);
  }
  return out;
}

/** Adds the sinusoidal position encoding of "Attention is all you need" to rows [L, dim]. */
export function addPositions(data, L, dim, offset = 0) {
  const div = new Float64Array(dim); // each column's wavelength, computed once (the same numbers)
  for (let i = 0; i < dim; i++) div[i] = Math.pow(10000, (2 * Math.floor(i / 2)) / dim);
  for (let p = 0; p < L; p++)
    for (let i = 0; i < dim; i++) {
      const angle = (p + offset) / div[i];
      data[p * dim + i] += i % 2 ? Math.cos(angle) : Math.sin(angle);
    }
  return data;
}

/** Rows [tokens.length, dim] of token vectors, as {data, shape}; a repeated word is drawn once. */
export function embed(tokens, dim, {seed = 0, scale = 1, positions = false, stream = 0} = {}) {
  const data = new Float32Array(tokens.length * dim);
  const drawn = new Map();
  tokens.forEach((w, i) => {
    let v = drawn.get(w);
    if (!v) drawn.set(w, (v = tokenVector(w, dim, seed, scale, stream)));
    data.set(v, i * dim);
  });
  if (positions) addPositions(data, tokens.length, dim);
  return {data, shape: [tokens.length, dim]};
}

// Generated text for long inputs: pseudo-words of two or three syllables, drawn from a seeded
// stream with a skew toward a few hundred frequent ones, so words repeat as in real text (and a
// repeated word has the same vector).
const SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ba", "de", "fu", "go", "hi", "jo", "pe", "zu"];

/** n generated tokens (the same n and seed give the same tokens). */
export function generateTokens(n, seed = 0) {
  const next = splitmix32(fnv1a(`generate\u0000${seed}`));
  const out = new Array(n);
  for (let i = 0; i < n; i++) {
    const r = next();
    const rank = Math.floor(((r >>> 16) / 65536) ** 3 * 4096); // skewed: small ranks are frequent
    const a = rank & 15, b = (rank >> 4) & 15, c = rank >> 8;
    out[i] = SYLLABLES[a] + SYLLABLES[b] + (c ? SYLLABLES[c] : "");
  }
  return out;
}

/**
 * The tensors of a request for a layer config: query [L, E]; key [S, kdim] and value [S, vdim]
 * when key tokens are given or the layer's kdim/vdim differ from E (then the query's tokens are
 * the keys too). value is left out when it would equal key (the API then uses key).
 */
export function tokenInputs(cfg, queryTokens, keyTokens, opts = {}) {
  const E = cfg.embed_dim, kdim = cfg.kdim ?? E, vdim = cfg.vdim ?? E;
  const query = embed(queryTokens, E, opts);
  const cross = keyTokens && keyTokens.length > 0;
  if (!cross && kdim === E && vdim === E) return {query, keyTokens: queryTokens};
  const kt = cross ? keyTokens : queryTokens;
  const key = embed(kt, kdim, opts);
  const out = {query, key, keyTokens: kt};
  if (vdim !== kdim) out.value = embed(kt, vdim, {...opts, stream: 1});
  return out;
}

/**
 * A pasted tensor: nested arrays [L, E] (or [1, L, E]), a tensor object {shape, data}, or an
 * object {"query": ..., "key": ..., "value": ...} of those. Returns {query, key?, value?} as
 * {data: Float32Array, shape: [rows, features]}; throws an Error saying what is wrong.
 */
export function parsePasted(text) {
  let j;
  try {
    j = JSON.parse(text);
  } catch (e) {
    throw new Error(`not JSON: ${e.message}`);
  }
  if (j && typeof j === "object" && !Array.isArray(j) && !("shape" in j)) {
    if (!("query" in j)) throw new Error('an object must have "query" (and may have "key", "value")');
    const out = {};
    for (const k of ["query", "key", "value"]) if (j[k] != null) out[k] = matrix(j[k], k);
    for (const k of Object.keys(j)) if (!["query", "key", "value"].includes(k)) throw new Error(`unknown member "${k}"`);
    return out;
  }
  return {query: matrix(j, "query")};
}

function matrix(v, what) {
  let data, shape;
  if (Array.isArray(v)) {
    shape = [];
    for (let a = v; Array.isArray(a); a = a[0]) shape.push(a.length);
    const flat = v.flat(Infinity);
    if (flat.length !== shape.reduce((a, b) => a * b, 1)) throw new Error(`${what}: ragged array`);
    data = Float32Array.from(flat, (x) => {
      if (typeof x !== "number" || !Number.isFinite(x)) throw new Error(`${what}: ${JSON.stringify(x)} is not a finite number`);
      return x;
    });
  } else if (v && typeof v === "object" && Array.isArray(v.shape) && Array.isArray(v.data)) {
    shape = v.shape;
    data = Float32Array.from(v.data);
    if (data.length !== shape.reduce((a, b) => a * b, 1)) throw new Error(`${what}: data does not fill shape [${shape}]`);
  } else {
    throw new Error(`${what}: expected nested arrays or {"shape", "data"}`);
  }
  return squeeze({data, shape}, what);
}

/** [1, L, E] -> [L, E]; anything but 2-D after that is refused. */
export function squeeze(t, what = "tensor") {
  let shape = t.shape.slice();
  while (shape.length > 2 && shape[0] === 1) shape = shape.slice(1);
  if (shape.length !== 2) throw new Error(`${what}: shape [${t.shape}] is not [rows, features] (or [1, rows, features])`);
  if (shape[0] < 1 || shape[1] < 1) throw new Error(`${what}: empty shape [${t.shape}]`);
  return {data: t.data, shape};
}
