// attnd.js - a small client for attnd's /v1 API, as one ES module with no dependencies.
//
//   import {Client} from "http://127.0.0.1:8080/ui/attnd.js";
//   const attnd = new Client();               // the daemon that served this file (its /ui/ parent)
//   const r = await attnd.forward("demo", {query: {data: new Float32Array(3 * 64), shape: [3, 64]},
//                                          needWeights: true, averageAttnWeights: false});
//   r.attnWeights.data  // Float32Array, r.attnWeights.shape = [H, L, S]
//   // only what you want, at any length: head 5's 8 strongest keys for queries 0..127, in float16
//   const t = await attnd.forward("demo", {query, weightsSelect: {heads: [5], queries: [0, 128], topK: 8, dtype: "float16"}});
//   t.attnTopk.indices  // Int32Array [1, 128, 8] of key indices; t.attnTopk.values a Float32Array
//
// Tensors go out and come back as {data, shape, dtype}: data is a Float32Array (float32),
// a Uint8Array (bool, 1 = true) or an Int32Array (int32). On the wire they are base64
// (little-endian, bit for bit); plain nested arrays are sent as they are.
// Every failure is an AttndError carrying the API's status, code, message and field.
// Works in browsers and in node >= 18 (global fetch); no build step.

// ---------------------------------------------------------------------------------------------
// Errors

/** An error answered by attnd (or a failure to reach it: status 0, code "network"). */
export class AttndError extends Error {
  constructor({status = 0, code = "error", message = "", field = null, requestId = null, body = null, retryAfter = null}) {
    super(message || code);
    this.name = "AttndError";
    this.status = status;       // HTTP status, 0 when no answer came
    this.code = code;           // the API's code: "too_large", "shape_mismatch", "unauthorized", ...
    this.field = field;         // the request member at fault ("query", "config.embed_dim"), or null
    this.requestId = requestId; // X-Request-Id of the failed request, when the daemon sent one
    this.body = body;           // the parsed error body
    this.retryAfter = retryAfter; // seconds the daemon asked to wait (Retry-After of a 503), or null
  }
}

// ---------------------------------------------------------------------------------------------
// Base64 of raw bytes (no btoa/atob: those work on strings of Latin-1 and are slow on 100 MB)

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B64_INV = new Int16Array(256).fill(-1);
for (let i = 0; i < 64; i++) B64_INV[B64.charCodeAt(i)] = i;

/** Base64 text of a byte array (standard alphabet, padded). */
export function base64Encode(bytes) {
  const n = bytes.length;
  const parts = [];
  const CHUNK = 3 * 16384; // bytes per piece, a multiple of 3 so only the last piece pads
  for (let start = 0; start < n; start += CHUNK) {
    const end = Math.min(n, start + CHUNK);
    const codes = new Uint8Array(Math.ceil((end - start) / 3) * 4);
    let o = 0, i = start;
    for (; i + 2 < end; i += 3) {
      const v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
      codes[o++] = B64.charCodeAt(v >> 18);
      codes[o++] = B64.charCodeAt((v >> 12) & 63);
      codes[o++] = B64.charCodeAt((v >> 6) & 63);
      codes[o++] = B64.charCodeAt(v & 63);
    }
    if (i < end) {
      const v = (bytes[i] << 16) | ((i + 1 < end ? bytes[i + 1] : 0) << 8);
      codes[o++] = B64.charCodeAt(v >> 18);
      codes[o++] = B64.charCodeAt((v >> 12) & 63);
      codes[o++] = i + 1 < end ? B64.charCodeAt((v >> 6) & 63) : 61;
      codes[o++] = 61;
    }
    parts.push(String.fromCharCode.apply(null, codes.subarray(0, 8192)));
    for (let p = 8192; p < o; p += 8192)
      parts.push(String.fromCharCode.apply(null, codes.subarray(p, Math.min(o, p + 8192))));
  }
  return parts.join("");
}

/** Bytes of a base64 text; throws on a character outside the alphabet or a bad length. */
export function base64Decode(text) {
  let len = text.length;
  while (len > 0 && text.charCodeAt(len - 1) === 61) len--; // '=' padding
  if (text.length % 4 === 1 || text.length - len > 2) throw new Error("bad base64 length");
  const out = new Uint8Array(Math.floor((len * 3) / 4));
  let o = 0, acc = 0, bits = 0;
  for (let i = 0; i < len; i++) {
    const v = B64_INV[text.charCodeAt(i) & 255];
    if (v < 0 || text.charCodeAt(i) > 255) throw new Error(`bad base64 character at ${i}`);
    acc = ((acc << 6) | v) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (acc >> bits) & 255;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tensors

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

function swapBytes(bytes, width) {
  for (let i = 0; i + width <= bytes.length; i += width)
    for (let a = i, b = i + width - 1; a < b; a++, b--) {
      const t = bytes[a];
      bytes[a] = bytes[b];
      bytes[b] = t;
    }
}

/** Number of elements of a shape. */
export function numel(shape) {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** A tensor value: {data, shape, dtype}; dtype defaults from the typed array. */
export function tensor(data, shape, dtype) {
  if (!dtype) dtype = data instanceof Uint8Array ? "bool" : data instanceof Int32Array ? "int32" : "float32";
  if (shape && ArrayBuffer.isView(data) && numel(shape) !== data.length)
    throw new RangeError(`shape [${shape}] holds ${numel(shape)} values, data has ${data.length}`);
  return {data, shape: shape || [data.length], dtype};
}

/**
 * The wire form of a tensor argument. Typed arrays become base64; nested arrays, numbers and
 * tensor objects already in the API's form ({shape, data} / {shape, base64}) go as they are.
 */
export function encodeTensor(t) {
  if (t == null || Array.isArray(t) || typeof t !== "object") return t;
  if (ArrayBuffer.isView(t)) t = tensor(t); // a bare typed array: 1-D
  if (!ArrayBuffer.isView(t.data)) return t; // {shape, data: [...]} or {shape, base64}
  const dtype = t.dtype || tensor(t.data).dtype;
  const shape = t.shape || [t.data.length];
  let bytes;
  if (dtype === "bool") {
    bytes = new Uint8Array(t.data.length);
    for (let i = 0; i < bytes.length; i++) bytes[i] = t.data[i] ? 1 : 0;
  } else if (dtype === "float32") {
    const f = t.data instanceof Float32Array ? t.data : Float32Array.from(t.data);
    bytes = new Uint8Array(f.buffer, f.byteOffset, f.byteLength);
    if (!LITTLE_ENDIAN) swapBytes((bytes = bytes.slice()), 4);
  } else {
    throw new TypeError(`cannot send dtype ${dtype} (float32 and bool only)`);
  }
  return {shape, dtype, base64: base64Encode(bytes)};
}

// ---------------------------------------------------------------------------------------------
// Half precision: IEEE binary16 (float16) and bfloat16, widened to float32 exactly, bit for bit
// as torch's .float() does (every value of both formats is a float32; signed zeros and NaN
// payloads are kept, a float16 NaN comes out quiet).

/** The float32 bits (uint32) of the binary16 value with bits h (0..65535). */
export function float16Bits(h) {
  const sign = (h & 0x8000) << 16, e = (h >> 10) & 31;
  let m = h & 1023;
  if (e === 31) return (sign | (m ? 0x7fc00000 : 0x7f800000) | (m << 13)) >>> 0; // inf; NaN, quiet
  if (e !== 0) return (sign | ((e + 112) << 23) | (m << 13)) >>> 0; // normal: rebias 15 -> 127
  if (m === 0) return sign >>> 0; // +-0
  // subnormal: m * 2^-24; shift the leading one up into the implicit bit
  let exp = 113; // 127 - 14
  while (!(m & 1024)) {
    m <<= 1;
    exp--;
  }
  return (sign | (exp << 23) | ((m & 1023) << 13)) >>> 0;
}

const F16_TABLE = new Uint32Array(65536);
for (let h = 0; h < 65536; h++) F16_TABLE[h] = float16Bits(h);

/** float16 bits (Uint16Array) to a Float32Array of the same values, exactly. */
export function float16ToFloat32(u16) {
  const out = new Float32Array(u16.length), bits = new Uint32Array(out.buffer);
  for (let i = 0; i < u16.length; i++) bits[i] = F16_TABLE[u16[i]];
  return out;
}

/** bfloat16 bits (Uint16Array) to a Float32Array: a bfloat16 is the top half of a float32. */
export function bfloat16ToFloat32(u16) {
  const out = new Float32Array(u16.length), bits = new Uint32Array(out.buffer);
  for (let i = 0; i < u16.length; i++) bits[i] = u16[i] << 16;
  return out;
}

/** A tensor from the API's JSON (base64, flat or nested) as {data: typed array, shape, dtype}. */
export function decodeTensor(j) {
  if (j && typeof j === "object" && !Array.isArray(j) && "shape" in j) {
    const dtype = j.dtype || "float32";
    const n = numel(j.shape);
    if (typeof j.base64 === "string") {
      const raw = base64Decode(j.base64);
      const width = {float32: 4, int32: 4, float16: 2, bfloat16: 2, bool: 1}[dtype];
      if (!width) throw new TypeError(`unknown dtype ${dtype}`);
      if (raw.length !== n * width)
        throw new RangeError(`base64 holds ${raw.length} bytes, shape [${j.shape}] of ${dtype} needs ${n * width}`);
      if (!LITTLE_ENDIAN && width > 1) swapBytes(raw, width);
      if (dtype === "float32") return {data: new Float32Array(raw.buffer, 0, n), shape: j.shape, dtype};
      if (dtype === "int32") return {data: new Int32Array(raw.buffer, 0, n), shape: j.shape, dtype};
      if (dtype === "bool") return {data: raw, shape: j.shape, dtype};
      const u16 = new Uint16Array(raw.buffer, 0, n);
      const data = dtype === "float16" ? float16ToFloat32(u16) : bfloat16ToFloat32(u16);
      return {data, shape: j.shape, dtype: "float32", wireDtype: dtype};
    }
    if (Array.isArray(j.data)) return fromNested(j.data, j.shape, dtype);
  }
  if (Array.isArray(j)) {
    const shape = [];
    for (let a = j; Array.isArray(a); a = a[0]) shape.push(a.length);
    return fromNested(j.flat(Infinity), shape, "float32");
  }
  throw new TypeError("not a tensor");
}

function fromNested(flat, shape, dtype) {
  if (flat.length !== numel(shape)) throw new RangeError(`ragged or mis-shaped tensor [${shape}]`);
  if (dtype === "bool" || flat.some((v) => typeof v === "boolean"))
    return {data: Uint8Array.from(flat, (v) => (v ? 1 : 0)), shape, dtype: "bool"};
  const Ctor = dtype === "int32" ? Int32Array : Float32Array;
  // float16 / bfloat16 values come as the decimals of the rounded values: float32s, exactly
  const out = {data: Ctor.from(flat, (v) => (v === "-inf" ? -Infinity : v === "inf" ? Infinity : +v)), shape, dtype: dtype === "int32" ? dtype : "float32"};
  if (dtype === "float16" || dtype === "bfloat16") out.wireDtype = dtype;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Trace stages and their axes

// The layout of each stage before stages carried "axes" (N batch, L target, S source,
// E embed, H heads, D head_dim). A daemon that sends "axes" is always believed instead.
const LEGACY_AXES = {
  q_proj: "NLE", k_proj: "NSE", v_proj: "NSE",
  q_heads: "NHLD", k_heads: "NHSD", v_heads: "NHSD",
  scores: "NHLS", attn_weights: "NHLS", head_outputs: "NHLD",
  concat: "NLE", output: "NLE",
};

/** The stages of the pass, in order: what trace returns when no selection is made. */
export const TRACE_STAGES = Object.keys(LEGACY_AXES);

/** One stage of a trace: {name, shape, axes, data}; get({H: 1, L: 2, D: 0}) reads one value. */
export class Stage {
  /**
   * select: for the stages a weights_select narrows (scores, attn_weights), where they start:
   * {L: first query, S: first key, H: [the heads, in the order returned] or null}. get() and
   * index() then take the full pass's coordinates (query 700, head 5), not positions in the slice.
   */
  constructor(name, shape, axes, data, axesGiven, select = null) {
    this.name = name;
    this.shape = shape;
    this.axes = axes; // one name per dimension, or null when neither given nor known
    this.axesGiven = axesGiven;
    this.data = data;
    this.select = select;
  }

  /** Size of the named axis (1 when the stage does not have it): the slice's size when selected. */
  size(axis) {
    const k = this.axes ? this.axes.indexOf(axis) : -1;
    return k < 0 ? 1 : this.shape[k];
  }

  /** The full pass's index of the first element along axis (0 unless a selection starts later). */
  start(axis) {
    return (this.select && axis !== "H" && this.select[axis]) || 0;
  }

  /** Position along axis d of the full pass's coordinate c (-1 when the selection leaves it out). */
  position(d, c) {
    const a = this.axes[d], sel = this.select;
    if (!sel) return c;
    if (a === "H" && Array.isArray(sel.H)) return sel.H.indexOf(c);
    return c - (sel[a] || 0);
  }

  /** Flat index of the element at coords ({axis: index}, absent axes at their first element). */
  index(coords) {
    if (!this.axes) throw new Error(`stage ${this.name} has no known axes`);
    let idx = 0;
    for (let d = 0; d < this.shape.length; d++) {
      const c = coords[this.axes[d]];
      const p = c === undefined ? 0 : this.position(d, c);
      if (!(p >= 0 && p < this.shape[d])) {
        const lo = this.start(this.axes[d]);
        throw new RangeError(`${this.axes[d]}=${c} outside ${lo}..${lo + this.shape[d] - 1}${this.select ? " (the selection)" : ""}`);
      }
      idx = idx * this.shape[d] + p;
    }
    return idx;
  }

  get(coords) {
    return this.data[this.index(coords)];
  }
}

function stageAxes(s) {
  if (Array.isArray(s.axes) && s.axes.length === s.shape.length) return [s.axes.map(String), true];
  const legacy = LEGACY_AXES[s.name];
  if (!legacy) return [null, false];
  if (legacy.length === s.shape.length) return [legacy.split(""), false];
  if (legacy.length === s.shape.length + 1 && legacy[0] === "N") return [legacy.slice(1).split(""), false];
  return [null, false];
}

// ---------------------------------------------------------------------------------------------
// Choosing which weights come back: weights_select

// camelCase names of weights_select's members (the API's own names are taken as they are)
const SELECT_MEMBER = {topK: "top_k", poolOp: "pool_op"};

/**
 * The API's weights_select of a selection {heads, queries, keys, topK, pool, poolOp, dtype}:
 * heads a list (typed arrays welcome), queries and keys [start, stop), pool [a, b] (or one number
 * for both), dtype "float32" | "float16" | "bfloat16". Members left null or undefined take the
 * API's default (all heads, every query and key, float32). Nothing is checked here: the daemon
 * answers a bad selection with a 400 naming the member (weights_select.heads, ...).
 */
export function selectBody(sel) {
  if (sel == null || typeof sel !== "object") return sel;
  const out = {};
  for (const [k, v] of Object.entries(sel)) {
    if (v == null) continue;
    const name = SELECT_MEMBER[k] || k;
    if (name === "pool" && typeof v === "number") out[name] = [v, v];
    else out[name] = ArrayBuffer.isView(v) ? Array.from(v) : v;
  }
  return out;
}

/** Where a selection's stages start, for Stage: {L, S, H} (null without a selection). */
function stageSelect(sel) {
  if (!sel || sel.pool != null || sel.top_k != null) return null; // blocks or top-k: no cell origin
  return {L: sel.queries ? sel.queries[0] : 0, S: sel.keys ? sel.keys[0] : 0, H: sel.heads ? Array.from(sel.heads) : null};
}

// ---------------------------------------------------------------------------------------------
// The client

// camelCase names of forward/trace members; anything else is sent under the name given.
const MEMBER = {
  keyPaddingMask: "key_padding_mask", attnMask: "attn_mask", isCausal: "is_causal",
  needWeights: "need_weights", averageAttnWeights: "average_attn_weights",
  weightsSelect: "weights_select", keyPositions: "key_positions", needOutput: "need_output",
};
const TENSOR_MEMBERS = new Set(["query", "key", "value", "key_padding_mask", "attn_mask"]);

// The daemon that served this module: the folder above /ui/attnd.js (so a proxy that serves attnd
// under a prefix, /attnd/ui/attnd.js, is followed); "" (same origin) when loaded from a file.
function defaultBase() {
  try {
    const u = new URL("../", import.meta.url);
    if (u.protocol === "http:" || u.protocol === "https:") return u.href;
  } catch (e) { /* not loaded from a URL */ }
  return "";
}

function layerPath(name) {
  return `/v1/layers/${encodeURIComponent(name)}`;
}

export class Client {
  /**
   * base: the daemon's URL ("http://127.0.0.1:8080"); default: the daemon this module was loaded
   * from (so /ui/attnd.js talks to the daemon that served it).
   * options: apiKey (sent as a Bearer token), fetch (an implementation, e.g. for tests),
   * headers (added to every request), requestId (a string, or a function returning one, sent as
   * X-Request-Id; needs the daemon's CORS to allow that header when cross-origin), retries (how
   * many times a 503 that carries Retry-After, a daemon busy or starting, is sent again after the
   * time it asks for, at most 30 s each; default 0).
   */
  constructor(base, options = {}) {
    this.base = String(base ?? defaultBase()).replace(/\/+$/, "");
    this.apiKey = options.apiKey || null;
    this.headers = options.headers || {};
    this.requestId = options.requestId || null;
    this.fetchImpl = options.fetch || ((url, init) => globalThis.fetch(url, init));
    this.retries = options.retries || 0;
    this.traceSelects = true; // false once the daemon said it has no "stages" member
  }

  /** The raw request: JSON (or bytes) in, parsed JSON out; an AttndError on any failure. */
  async request(method, path, options = {}) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.requestOnce(method, path, options);
      } catch (e) {
        if (!(e instanceof AttndError) || e.status !== 503 || e.retryAfter == null || attempt >= this.retries) throw e;
        await new Promise((resolve) => setTimeout(resolve, Math.min(30, Math.max(0.05, e.retryAfter)) * 1000));
        if (options.signal && options.signal.aborted) throw e;
      }
    }
  }

  async requestOnce(method, path, {json, bytes, accept, headers = {}, signal} = {}) {
    const h = {Accept: accept || "application/json", ...this.headers, ...headers};
    let body;
    if (json !== undefined) {
      h["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    } else if (bytes !== undefined) {
      h["Content-Type"] = "application/octet-stream";
      body = bytes;
    }
    if (this.apiKey) h.Authorization = `Bearer ${this.apiKey}`;
    if (this.requestId) h["X-Request-Id"] = typeof this.requestId === "function" ? this.requestId() : this.requestId;
    let res;
    try {
      res = await this.fetchImpl(this.base + path, {method, headers: h, body, signal});
    } catch (e) {
      if (e && e.name === "AbortError") throw e;
      throw new AttndError({code: "network", message: `cannot reach ${this.base || "the daemon"}: ${e && e.message}`});
    }
    const requestId = res.headers.get("X-Request-Id");
    if (!res.ok) {
      const wait = res.headers.get("Retry-After"), retryAfter = wait != null && /^\d+(\.\d+)?$/.test(wait.trim()) ? Number(wait) : null;
      const text = await res.text().catch(() => "");
      let parsed = null;
      try { parsed = JSON.parse(text); } catch (e) { /* not JSON: a proxy's page */ }
      const err = parsed && parsed.error;
      if (err && typeof err === "object")
        throw new AttndError({status: res.status, code: err.code, message: err.message, field: err.field ?? null,
                              requestId: err.request_id ?? requestId, body: parsed, retryAfter});
      throw new AttndError({status: res.status, code: `http_${res.status}`, requestId, body: parsed, retryAfter,
                            message: typeof err === "string" ? err : `HTTP ${res.status} ${res.statusText || ""}`.trim()});
    }
    if (res.status === 204) return null;
    if (accept === "application/octet-stream") return new Uint8Array(await res.arrayBuffer());
    const text = await res.text();
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new AttndError({status: res.status, code: "bad_reply", message: "the reply is not JSON", requestId});
    }
  }

  /** GET /v1/layers: [{name, version, config, parameter_count}, ...] */
  async list() {
    return (await this.request("GET", "/v1/layers")).layers;
  }

  /**
   * GET /v1/layers/{name}: config, parameters, each head's rows, FLOPs (for L, S, N if given), and
   * with weightsSelect (and averageAttnWeights) what a forward pass with that selection would
   * return at that length: the answer's weights_select {shape, elements, dtype, bytes, fits, ...}.
   */
  async describe(name, {L, S, N, weightsSelect, averageAttnWeights} = {}) {
    const q = new URLSearchParams();
    if (L != null) q.set("L", L);
    if (S != null) q.set("S", S);
    if (N != null) q.set("N", N);
    const sel = selectBody(weightsSelect);
    if (sel) { // as /v2's flat parameters: "0,5", "0:128", "8x8"
      const flat = {heads: (v) => v.join(","), queries: (v) => v.join(":"), keys: (v) => v.join(":"), pool: (v) => v.join("x")};
      for (const [k, v] of Object.entries(sel)) q.set(`weights_${k}`, flat[k] ? flat[k](v) : String(v));
    }
    if (averageAttnWeights != null) q.set("average_attn_weights", averageAttnWeights ? "true" : "false");
    const qs = q.toString();
    return this.request("GET", layerPath(name) + (qs ? `?${qs}` : ""));
  }

  /**
   * PUT /v1/layers/{name}: create or replace. spec: {config, init} or {config, weights} (weights: a
   * map of tensors, typed arrays welcome). options: ifMatch, ifNoneMatch. Returns the summary.
   */
  async put(name, spec, {ifMatch, ifNoneMatch} = {}) {
    const body = {...spec};
    if (spec.weights) {
      body.weights = {};
      for (const [k, v] of Object.entries(spec.weights)) body.weights[k] = encodeTensor(v);
    }
    return this.request("PUT", layerPath(name), {json: body, headers: conditional(ifMatch, ifNoneMatch)});
  }

  /** PUT /v1/layers/{name} with a safetensors file holding __metadata__.config. */
  async putSafetensors(name, bytes, {ifMatch, ifNoneMatch} = {}) {
    return this.request("PUT", layerPath(name), {bytes, headers: conditional(ifMatch, ifNoneMatch)});
  }

  /** PUT /v1/layers/{name}/weights: a safetensors file (Uint8Array) or a map of tensors. */
  async putWeights(name, weights, {ifMatch} = {}) {
    const headers = conditional(ifMatch);
    if (weights instanceof Uint8Array || weights instanceof ArrayBuffer)
      return this.request("PUT", `${layerPath(name)}/weights`, {bytes: weights, headers});
    const json = {};
    for (const [k, v] of Object.entries(weights)) json[k] = encodeTensor(v);
    return this.request("PUT", `${layerPath(name)}/weights`, {json, headers});
  }

  /** DELETE /v1/layers/{name}. */
  async delete(name, {ifMatch} = {}) {
    await this.request("DELETE", layerPath(name), {headers: conditional(ifMatch)});
  }

  /** GET /v1/layers/{name}/weights: {param: {data: Float32Array, shape, dtype}}. */
  async weights(name) {
    const j = await this.request("GET", `${layerPath(name)}/weights?encoding=base64`);
    const out = {};
    for (const [k, v] of Object.entries(j)) out[k] = decodeTensor(v);
    return out;
  }

  /** GET /v1/layers/{name}/weights as a safetensors file (Uint8Array). */
  async weightsSafetensors(name) {
    return this.request("GET", `${layerPath(name)}/weights`, {accept: "application/octet-stream"});
  }

  /**
   * POST /v1/layers/{name}/forward. inputs: query, key, value, keyPaddingMask, attnMask (tensors),
   * isCausal, needWeights, averageAttnWeights, weightsSelect ({heads, queries, keys, topK, pool,
   * poolOp, dtype}: see selectBody), needOutput (false: the reply has no output, output is null),
   * and any other member under its API name.
   * Returns {output, attnWeights?, attnTopk?}: tensors as {data, shape, dtype}, weights always a
   * Float32Array (float16 and bfloat16 widened exactly; wireDtype says what came), and top-k as
   * {indices: Int32Array (absolute key indices), values: Float32Array, shape: [..., k]}.
   */
  async forward(name, inputs, {signal} = {}) {
    const j = await this.request("POST", `${layerPath(name)}/forward`, {json: requestBody(inputs), signal});
    const out = {output: j.output != null ? decodeTensor(j.output) : null};
    if (j.attn_weights != null) out.attnWeights = decodeTensor(j.attn_weights);
    if (j.attn_topk != null) {
      const idx = decodeTensor(j.attn_topk.indices), val = decodeTensor(j.attn_topk.values);
      if (JSON.stringify(idx.shape) !== JSON.stringify(val.shape))
        throw new AttndError({status: 200, code: "bad_reply", message: `top-k indices [${idx.shape}] and values [${val.shape}] differ in shape`});
      out.attnTopk = {indices: idx.data instanceof Int32Array ? idx.data : Int32Array.from(idx.data), values: val.data,
                      shape: val.shape, wireDtype: val.wireDtype || "float32"};
    }
    return out;
  }

  /**
   * POST /v1/layers/{name}/trace: every stage of the pass, as Stage objects in pipeline order.
   * options.stages: only those stages (a daemon without that member sends all; they are
   * then filtered here). Returns {stages: [Stage], stage(name)}.
   */
  async trace(name, inputs, {stages, signal} = {}) {
    const body = requestBody(inputs);
    let j;
    if (stages && this.traceSelects) {
      try {
        j = await this.request("POST", `${layerPath(name)}/trace`, {json: {...body, stages}, signal});
      } catch (e) {
        if (!(e instanceof AttndError && e.code === "unknown_field" && e.field === "stages")) throw e;
        this.traceSelects = false;
      }
    }
    if (!j) j = await this.request("POST", `${layerPath(name)}/trace`, {json: body, signal});
    const select = stageSelect(body.weights_select);
    let list = j.stages.map((s) => {
      const [axes, given] = stageAxes(s);
      const narrowed = select && (s.name === "scores" || s.name === "attn_weights");
      return new Stage(s.name, s.shape, axes, decodeTensor(s.tensor).data, given, narrowed ? select : null);
    });
    if (stages) list = list.filter((s) => stages.includes(s.name));
    return {stages: list, stage: (n) => list.find((s) => s.name === n) || null};
  }
}

function conditional(ifMatch, ifNoneMatch) {
  const h = {};
  if (ifMatch != null) h["If-Match"] = ifMatch === "*" ? "*" : `"${String(ifMatch).replace(/"/g, "")}"`;
  if (ifNoneMatch != null) h["If-None-Match"] = ifNoneMatch === "*" ? "*" : `"${String(ifNoneMatch).replace(/"/g, "")}"`;
  return h;
}

function requestBody(inputs) {
  const body = {encoding: "base64"};
  for (const [k, v] of Object.entries(inputs || {})) {
    if (v === undefined) continue;
    const name = MEMBER[k] || k;
    body[name] = TENSOR_MEMBERS.has(name) ? encodeTensor(v) : name === "weights_select" ? selectBody(v) : v;
  }
  return body;
}
