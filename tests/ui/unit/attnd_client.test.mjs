// Unit tests of web/attnd.js under node's test runner: the wire format (base64 bit for bit),
// request bodies, typed errors, trace axes, with a fake fetch (no daemon, no browser).
import {test} from "node:test";
import assert from "node:assert/strict";
import {Client, AttndError, Stage, base64Encode, base64Decode, encodeTensor, decodeTensor, tensor, numel, TRACE_STAGES}
  from "../../../web/attnd.js";

/** A fetch that records requests and answers with reply(url, init) -> {status, body, headers}. */
function fakeFetch(reply) {
  const calls = [];
  const fn = async (url, init) => {
    calls.push({url, init, json: typeof init.body === "string" ? JSON.parse(init.body) : null});
    const r = await reply(url, init, calls.length - 1);
    const body = typeof r.body === "string" ? r.body : JSON.stringify(r.body);
    return new Response(r.status === 204 ? null : body, {status: r.status || 200, headers: r.headers || {"Content-Type": "application/json"}});
  };
  fn.calls = calls;
  return fn;
}

const b64 = (f32) => Buffer.from(f32.buffer, f32.byteOffset, f32.byteLength).toString("base64");

test("base64 of every length agrees with node's Buffer, both ways", () => {
  for (let n = 0; n < 70; n++) {
    const bytes = Uint8Array.from({length: n}, (_, i) => (i * 73 + n * 31) & 255);
    const text = base64Encode(bytes);
    assert.equal(text, Buffer.from(bytes).toString("base64"));
    assert.deepEqual(base64Decode(text), bytes);
  }
  const big = Uint8Array.from({length: 200003}, (_, i) => (i * 2654435761) >>> 24);
  assert.equal(base64Encode(big), Buffer.from(big).toString("base64"));
});

test("base64 decoding refuses characters outside the alphabet and bad lengths", () => {
  assert.throws(() => base64Decode("ab$d"), /character/);
  assert.throws(() => base64Decode("abcde"), /length/);
});

test("a Float32Array survives encode and decode bit for bit, special values included", () => {
  const bits = new Uint32Array([0x00000000, 0x80000000, 0x00000001, 0x007fffff, 0x3f800000, 0x7f7fffff,
                                0xff800000, 0x7f800000, 0x7fc00001, 0xbf9d70a4, 0x33d6bf95]);
  const f = new Float32Array(bits.buffer);
  const wire = encodeTensor(tensor(f, [11]));
  assert.deepEqual(wire, {shape: [11], dtype: "float32", base64: b64(f)});
  const back = decodeTensor(JSON.parse(JSON.stringify(wire)));
  assert.deepEqual(new Uint32Array(back.data.buffer, back.data.byteOffset, 11), bits);
  assert.deepEqual(back.shape, [11]);
});

test("bool masks go as one byte per element", () => {
  const wire = encodeTensor({data: Uint8Array.from([1, 0, 0, 1]), shape: [2, 2], dtype: "bool"});
  assert.deepEqual(wire, {shape: [2, 2], dtype: "bool", base64: Buffer.from([1, 0, 0, 1]).toString("base64")});
  assert.deepEqual(decodeTensor(wire).data, Uint8Array.from([1, 0, 0, 1]));
});

test("nested arrays and API tensor objects are sent as they are", () => {
  assert.deepEqual(encodeTensor([[1, 2], [3, 4]]), [[1, 2], [3, 4]]);
  assert.deepEqual(encodeTensor({shape: [2], data: [1, 2]}), {shape: [2], data: [1, 2]});
});

test("tensor() checks that data fills the shape", () => {
  assert.throws(() => tensor(new Float32Array(5), [2, 3]), /holds 6/);
  assert.equal(numel([2, 3, 4]), 24);
});

test("decodeTensor reads nested, flat, -inf strings, int32, float16 and bfloat16", () => {
  assert.deepEqual(decodeTensor([[1, "-inf"], [0.5, 2]]), {data: Float32Array.from([1, -Infinity, 0.5, 2]), shape: [2, 2], dtype: "float32"});
  assert.deepEqual(decodeTensor({shape: [3], data: [1, 2, 3], dtype: "float32"}).data, Float32Array.from([1, 2, 3]));
  const i32 = Int32Array.from([7, -1, 4096]);
  assert.deepEqual(decodeTensor({shape: [3], dtype: "int32", base64: Buffer.from(i32.buffer).toString("base64")}).data, i32);
  const half = Uint16Array.from([0x3c00, 0xc000, 0x0001, 0x7c00]); // 1, -2, 2^-24, inf
  const h = decodeTensor({shape: [4], dtype: "float16", base64: Buffer.from(half.buffer).toString("base64")});
  assert.deepEqual(Array.from(h.data), [1, -2, 2 ** -24, Infinity]);
  const bf = Uint16Array.from([0x3f80, 0xbfc0]); // 1, -1.5
  assert.deepEqual(Array.from(decodeTensor({shape: [2], dtype: "bfloat16", base64: Buffer.from(bf.buffer).toString("base64")}).data), [1, -1.5]);
  assert.throws(() => decodeTensor({shape: [3], dtype: "float32", base64: "AAAA"}), /needs 12/);
});

test("forward sends base64 under the API's names and returns Float32Arrays", async () => {
  const out = Float32Array.from([0.25, -1.5, 3e-8, 7]);
  const w = Float32Array.from([0.5, 0.5, 1, 0]);
  const fetch = fakeFetch(() => ({body: {output: {shape: [2, 2], dtype: "float32", base64: b64(out)},
                                        attn_weights: {shape: [1, 2, 2], dtype: "float32", base64: b64(w)}}}));
  const c = new Client("http://attnd.test:8080/", {fetch});
  const q = Float32Array.from([1, 2, 3, 4]);
  const r = await c.forward("my.layer", {query: {data: q, shape: [2, 2]}, isCausal: true, needWeights: true,
                                         averageAttnWeights: false, keyPaddingMask: {data: Uint8Array.from([0, 1]), shape: [2], dtype: "bool"},
                                         weights_select: {heads: [0]}});
  const call = fetch.calls[0];
  assert.equal(call.url, "http://attnd.test:8080/v1/layers/my.layer/forward");
  assert.equal(call.init.method, "POST");
  assert.equal(call.init.headers["Content-Type"], "application/json");
  assert.deepEqual(call.json, {encoding: "base64", query: {shape: [2, 2], dtype: "float32", base64: b64(q)}, is_causal: true,
                               need_weights: true, average_attn_weights: false,
                               key_padding_mask: {shape: [2], dtype: "bool", base64: "AAE="}, weights_select: {heads: [0]}});
  assert.ok(r.output.data instanceof Float32Array);
  assert.deepEqual(r.output.data, out);
  assert.deepEqual(r.attnWeights.shape, [1, 2, 2]);
  assert.deepEqual(r.attnWeights.data, w);
});

test("needOutput: false is sent as need_output, and a reply without output gives output null", async () => {
  const w = Float32Array.from([0.5, 0.5]);
  const fetch = fakeFetch(() => ({body: {attn_weights: {shape: [1, 2], dtype: "float32", base64: b64(w)}}}));
  const c = new Client("http://attnd.test:8080/", {fetch});
  const r = await c.forward("demo", {query: {data: Float32Array.from([1, 2]), shape: [1, 2]}, needWeights: true, needOutput: false});
  assert.equal(fetch.calls[0].json.need_output, false);
  assert.equal(r.output, null);
  assert.deepEqual(r.attnWeights.data, w);
});

test("layer names are escaped in paths; describe passes L, S, N", async () => {
  const fetch = fakeFetch(() => ({body: {name: "x"}}));
  const c = new Client("", {fetch});
  await c.describe("a b", {L: 128, S: 64});
  assert.equal(fetch.calls[0].url, "/v1/layers/a%20b?L=128&S=64");
  await c.describe("demo");
  assert.equal(fetch.calls[1].url, "/v1/layers/demo");
});

test("errors carry the API's status, code, message, field and request id", async () => {
  const fetch = fakeFetch(() => ({status: 400, body: {error: {code: "shape_mismatch", message: "query has 3 features", field: "query", request_id: "r-1"}}}));
  const c = new Client("", {fetch});
  await assert.rejects(c.forward("demo", {query: [[1, 2, 3]]}), (e) => {
    assert.ok(e instanceof AttndError);
    assert.ok(e instanceof Error);
    assert.deepEqual([e.status, e.code, e.message, e.field, e.requestId], [400, "shape_mismatch", "query has 3 features", "query", "r-1"]);
    return true;
  });
});

test("a 413 is a typed error too", async () => {
  const fetch = fakeFetch(() => ({status: 413, body: {error: {code: "too_large", message: "the trace would hold 73728000 numbers", field: "query"}}}));
  await assert.rejects(new Client("", {fetch}).trace("demo", {query: [[1]]}), {name: "AttndError", status: 413, code: "too_large"});
});

test("a reply that is not JSON, a /v2-style error and a failed connection are typed as well", async () => {
  const html = fakeFetch(() => ({status: 502, body: "<html>bad gateway</html>", headers: {"Content-Type": "text/html"}}));
  await assert.rejects(new Client("", {fetch: html}).list(), {status: 502, code: "http_502"});
  const v2 = fakeFetch(() => ({status: 400, body: {error: "unknown model"}}));
  await assert.rejects(new Client("", {fetch: v2}).list(), {status: 400, code: "http_400", message: "unknown model"});
  const down = async () => { throw new TypeError("fetch failed"); };
  await assert.rejects(new Client("http://127.0.0.1:1", {fetch: down}).list(), {status: 0, code: "network"});
});

test("the API key is a Bearer token; If-Match and If-None-Match are quoted tags", async () => {
  const fetch = fakeFetch((url, init) => ({status: init.method === "DELETE" ? 204 : 201, body: {name: "x"}}));
  const c = new Client("", {fetch, apiKey: "s3cret"});
  await c.put("x", {config: {embed_dim: 4, num_heads: 2}, weights: {"out_proj.bias": Float32Array.from([1, 2, 3, 4])}}, {ifNoneMatch: "*"});
  await c.delete("x", {ifMatch: 7});
  assert.equal(fetch.calls[0].init.headers.Authorization, "Bearer s3cret");
  assert.equal(fetch.calls[0].init.headers["If-None-Match"], "*");
  assert.deepEqual(fetch.calls[0].json.weights["out_proj.bias"], {shape: [4], dtype: "float32", base64: b64(Float32Array.from([1, 2, 3, 4]))});
  assert.equal(fetch.calls[1].init.headers["If-Match"], '"7"');
  assert.equal(fetch.calls[1].init.method, "DELETE");
});

test("safetensors uploads go as application/octet-stream", async () => {
  const fetch = fakeFetch(() => ({body: {name: "x"}}));
  const c = new Client("", {fetch});
  const bytes = Uint8Array.from([8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32]);
  await c.putSafetensors("x", bytes);
  await c.putWeights("x", bytes);
  assert.equal(fetch.calls[0].init.headers["Content-Type"], "application/octet-stream");
  assert.equal(fetch.calls[0].init.body, bytes);
  assert.equal(fetch.calls[1].url, "/v1/layers/x/weights");
});

test("weights() decodes every parameter", async () => {
  const wgt = Float32Array.from({length: 12}, (_, i) => i / 7);
  const fetch = fakeFetch(() => ({body: {in_proj_weight: {shape: [3, 4], dtype: "float32", base64: b64(wgt)}}}));
  const w = await new Client("", {fetch}).weights("demo");
  assert.equal(fetch.calls[0].url, "/v1/layers/demo/weights?encoding=base64");
  assert.deepEqual(w.in_proj_weight.data, wgt);
});

// a trace reply of the given stages, shapes and (optionally) axes
function traceReply(stages) {
  return {stages: stages.map(([name, shape, axes]) => {
    const n = numel(shape);
    const data = Float32Array.from({length: n}, (_, i) => i);
    return {name, shape, ...(axes ? {axes} : {}), tensor: {shape, dtype: "float32", base64: b64(data)}};
  })};
}

test("trace stages without axes get the documented layout from their name", async () => {
  const fetch = fakeFetch(() => ({body: traceReply([["q_proj", [1, 3, 4]], ["q_heads", [1, 2, 3, 2]], ["scores", [1, 2, 3, 5]], ["output", [3, 4]], ["mystery", [2, 2]]])}));
  const t = await new Client("", {fetch}).trace("demo", {query: [[1, 2, 3, 4]]});
  assert.deepEqual(t.stages.map((s) => s.axes && s.axes.join("")), ["NLE", "NHLD", "NHLS", "LE", null]);
  assert.ok(t.stages.every((s) => !s.axesGiven));
  const scores = t.stage("scores");
  assert.equal(scores.get({H: 1, L: 2, S: 4}), 1 * 15 + 2 * 5 + 4);
  assert.equal(scores.size("S"), 5);
  assert.equal(scores.size("E"), 1);
  assert.throws(() => scores.get({S: 5}), /outside/);
  assert.equal(t.stage("output").get({L: 2, E: 3}), 11);
});

test("axes sent by the daemon are believed, whatever the order", async () => {
  const fetch = fakeFetch(() => ({body: traceReply([["output", [3, 1, 4], ["L", "N", "E"]], ["k_heads", [1, 1, 5, 2], ["N", "K", "S", "D"]]])}));
  const t = await new Client("", {fetch}).trace("demo", {query: [[1]]});
  const out = t.stage("output");
  assert.ok(out.axesGiven);
  assert.equal(out.get({L: 2, N: 0, E: 1}), 2 * 4 + 1);
  assert.deepEqual(t.stage("k_heads").axes, ["N", "K", "S", "D"]);
});

test('a "stages" selection is sent, and filtered here when the daemon does not know it', async () => {
  const all = traceReply(TRACE_STAGES.map((n) => [n, [1, 1, 1]]));
  const old = fakeFetch((url, init) => JSON.parse(init.body).stages
    ? {status: 400, body: {error: {code: "unknown_field", message: "unknown field 'stages'", field: "stages"}}}
    : {body: all});
  const c = new Client("", {fetch: old});
  const t = await c.trace("demo", {query: [[1]]}, {stages: ["scores", "attn_weights"]});
  assert.deepEqual(t.stages.map((s) => s.name), ["scores", "attn_weights"]);
  assert.equal(old.calls.length, 2);
  await c.trace("demo", {query: [[1]]}, {stages: ["output"]}); // remembered: one request
  assert.equal(old.calls.length, 3);
  assert.equal(old.calls[2].json.stages, undefined);

  const fresh = fakeFetch(() => ({body: traceReply([["scores", [1, 1, 1, 1]]])}));
  const t2 = await new Client("", {fetch: fresh}).trace("demo", {query: [[1]]}, {stages: ["scores"]});
  assert.deepEqual(fresh.calls[0].json.stages, ["scores"]);
  assert.equal(t2.stages.length, 1);
});

test("Stage indexes row-major over its axes", () => {
  const s = new Stage("x", [2, 3], ["L", "E"], Float32Array.from([0, 1, 2, 3, 4, 5]), true);
  assert.equal(s.get({L: 1, E: 2}), 5);
  assert.equal(s.index({}), 0);
});

test("without a base, a module loaded from a file talks to the same origin (relative paths)", async () => {
  const fetch = fakeFetch(() => ({body: {layers: []}}));
  const c = new Client(undefined, {fetch});
  assert.equal(c.base, "");
  assert.deepEqual(await c.list(), []);
  assert.equal(fetch.calls[0].url, "/v1/layers");
});

test("X-Request-Id is sent only when asked for", async () => {
  const fetch = fakeFetch(() => ({body: {layers: []}}));
  await new Client("", {fetch}).list();
  assert.equal(fetch.calls[0].init.headers["X-Request-Id"], undefined);
  let n = 0;
  await new Client("", {fetch, requestId: () => `req-${++n}`}).list();
  assert.equal(fetch.calls[1].init.headers["X-Request-Id"], "req-1");
});

// ---- weights_select: the weights a client chooses

const b64u16 = (codes) => Buffer.from(Uint16Array.from(codes).buffer).toString("base64");
const b64i32 = (ints) => Buffer.from(Int32Array.from(ints).buffer).toString("base64");
const f16 = {0x3c00: 1, 0x3800: 0.5, 0x3400: 0.25, 0x0001: 2 ** -24, 0x2e66: 0.0999755859375};

test("weightsSelect goes out under the API's names: top_k, pool_op, pool [a, b], typed arrays as lists", async () => {
  const fetch = fakeFetch(() => ({body: {output: {shape: [1, 1], dtype: "float32", base64: b64(Float32Array.from([0]))}}}));
  const c = new Client("", {fetch});
  await c.forward("demo", {query: [[1]], weightsSelect: {heads: Int32Array.from([5, 0]), queries: [0, 128], keys: [16, 4096],
                                                         topK: 8, poolOp: "max", pool: 4, dtype: "float16", tail: undefined, keysNull: null}});
  assert.deepEqual(fetch.calls[0].json.weights_select, {heads: [5, 0], queries: [0, 128], keys: [16, 4096], top_k: 8, pool_op: "max", pool: [4, 4], dtype: "float16"});
  await c.forward("demo", {query: [[1]], weights_select: {top_k: 3, pool: [2, 8]}}); // the API's own names pass as they are
  assert.deepEqual(fetch.calls[1].json.weights_select, {top_k: 3, pool: [2, 8]});
  await c.trace("demo", {query: [[1]], weightsSelect: {queries: [2, 3]}}).catch(() => {});
  assert.deepEqual(fetch.calls[2].json.weights_select, {queries: [2, 3]});
});

test("a float16 map comes back as a Float32Array of its exact values, with its shape", async () => {
  const codes = [0x3c00, 0x3800, 0x3400, 0x0001, 0x2e66, 0x3800];
  const fetch = fakeFetch(() => ({body: {output: {shape: [3, 1], dtype: "float32", base64: b64(new Float32Array(3))},
                                        attn_weights: {shape: [1, 2, 3], dtype: "float16", base64: b64u16(codes)}}}));
  const r = await new Client("", {fetch}).forward("demo", {query: [[1]], weightsSelect: {heads: [2], pool: [4, 8], dtype: "float16"}});
  assert.ok(r.attnWeights.data instanceof Float32Array);
  assert.deepEqual(r.attnWeights.shape, [1, 2, 3]);
  assert.equal(r.attnWeights.wireDtype, "float16");
  assert.deepEqual(Array.from(r.attnWeights.data), codes.map((k) => f16[k]));
});

test("top-k comes back as Int32Array indices and Float32Array values with their shape (base64, flat and nested)", async () => {
  const idx = [7, 3, 0, 1], vals = [0x3800, 0x3400, 0x3c00, 0x0001];
  const replies = [
    {indices: {shape: [2, 2], dtype: "int32", base64: b64i32(idx)}, values: {shape: [2, 2], dtype: "float16", base64: b64u16(vals)}},
    {indices: {shape: [2, 2], dtype: "int32", data: idx}, values: {shape: [2, 2], dtype: "float16", data: vals.map((k) => f16[k])}},
    {indices: [[7, 3], [0, 1]], values: [[0.5, 0.25], [1, 2 ** -24]]},
  ];
  for (const attn_topk of replies) {
    const fetch = fakeFetch(() => ({body: {output: {shape: [2, 1], data: [0, 0]}, attn_topk}}));
    const r = await new Client("", {fetch}).forward("demo", {query: [[1], [2]], weightsSelect: {heads: [0], topK: 2}});
    assert.equal(r.attnWeights, undefined);
    assert.ok(r.attnTopk.indices instanceof Int32Array && r.attnTopk.values instanceof Float32Array);
    assert.deepEqual(Array.from(r.attnTopk.indices), idx);
    assert.deepEqual(Array.from(r.attnTopk.values), vals.map((k) => f16[k]));
    assert.deepEqual(r.attnTopk.shape, [2, 2]);
  }
  const odd = fakeFetch(() => ({body: {output: [[0]], attn_topk: {indices: [[1, 2]], values: [[0.5]]}}}));
  await assert.rejects(new Client("", {fetch: odd}).forward("demo", {query: [[1]], weightsSelect: {topK: 2}}), {code: "bad_reply"});
});

test("a bad selection is the daemon's 400 naming the member; a daemon without weights_select says so", async () => {
  const bad = fakeFetch(() => ({status: 400, body: {error: {code: "invalid_value", message: "head 9 is outside 0..3", field: "weights_select.heads"}}}));
  await assert.rejects(new Client("", {fetch: bad}).forward("demo", {query: [[1]], weightsSelect: {heads: [9]}}),
    {name: "AttndError", status: 400, field: "weights_select.heads"});
  const old = fakeFetch(() => ({status: 400, body: {error: {code: "unknown_field", message: "unknown field 'weights_select'", field: "weights_select"}}}));
  await assert.rejects(new Client("", {fetch: old}).forward("demo", {query: [[1]], weightsSelect: {heads: [0]}}),
    {code: "unknown_field", field: "weights_select"});
});

test("a selected trace's scores and weights read with the full pass's coordinates", async () => {
  // queries [5, 7), keys [10, 13), heads [3, 1]: stages [1, 2, 2, 3]
  const fetch = fakeFetch(() => ({body: traceReply([["q_heads", [1, 4, 8, 2], ["N", "H", "L", "D"]], ["scores", [1, 2, 2, 3], ["N", "H", "L", "S"]],
                                                    ["attn_weights", [1, 2, 2, 3], ["N", "H", "L", "S"]]])}));
  const t = await new Client("", {fetch}).trace("demo", {query: [[1]], weightsSelect: {heads: [3, 1], queries: [5, 7], keys: [10, 13]}});
  const w = t.stage("attn_weights");
  assert.deepEqual([w.start("L"), w.start("S"), w.size("L"), w.size("S")], [5, 10, 2, 3]);
  assert.equal(w.get({H: 3, L: 5, S: 10}), 0);
  assert.equal(w.get({H: 1, L: 6, S: 12}), 1 * 6 + 1 * 3 + 2);
  assert.equal(w.get({L: 6, S: 11}), 3 + 1); // absent axes: their first element (head 3)
  assert.throws(() => w.get({H: 0, L: 5, S: 10}), /H=0 outside/);
  assert.throws(() => w.get({H: 3, L: 4, S: 10}), /L=4 outside 5..6 \(the selection\)/);
  assert.throws(() => w.get({H: 3, L: 5, S: 13}), /outside 10..12/);
  const q = t.stage("q_heads"); // not narrowed: every query, every head
  assert.equal(q.start("L"), 0);
  assert.equal(q.get({H: 3, L: 5, D: 1}), (3 * 8 + 5) * 2 + 1);
});

test("a 503 with Retry-After is asked again when the client allows retries; otherwise it is the error", async () => {
  const busy = (n) => fakeFetch((url, init, i) => (i < n ? {status: 503, body: {error: {code: "overloaded", message: "no free slot"}}, headers: {"Retry-After": "0", "Content-Type": "application/json"}}
                                                        : {body: {layers: [{name: "demo"}]}}));
  const once = busy(1);
  await assert.rejects(new Client("", {fetch: once}).list(), (e) => e.status === 503 && e.retryAfter === 0 && e.code === "overloaded");
  assert.equal(once.calls.length, 1);
  const twice = busy(2);
  assert.deepEqual(await new Client("", {fetch: twice, retries: 3}).list(), [{name: "demo"}]);
  assert.equal(twice.calls.length, 3);
  const always = busy(99);
  await assert.rejects(new Client("", {fetch: always, retries: 2}).list(), {status: 503});
  assert.equal(always.calls.length, 3);
  const noHeader = fakeFetch(() => ({status: 503, body: {error: {code: "shutting_down", message: "bye"}}}));
  await assert.rejects(new Client("", {fetch: noHeader, retries: 5}).list(), {status: 503, retryAfter: null});
  assert.equal(noHeader.calls.length, 1);
});

test("describe asks what a selection would return, in the flat form of the query string", async () => {
  const fetch = fakeFetch(() => ({body: {name: "demo", weights_select: {shape: [1, 16384, 8], bytes: {binary: 786432}}}}));
  const d = await new Client("", {fetch}).describe("demo", {L: 16384, weightsSelect: {heads: [0, 5], queries: [0, 128], keys: [16, 4096], topK: 8, pool: 4, poolOp: "max", dtype: "float16"},
                                                            averageAttnWeights: false});
  const u = new URL(fetch.calls[0].url, "http://x");
  assert.deepEqual(Object.fromEntries(u.searchParams), {L: "16384", weights_heads: "0,5", weights_queries: "0:128", weights_keys: "16:4096", weights_top_k: "8",
                                                        weights_pool: "4x4", weights_pool_op: "max", weights_dtype: "float16", average_attn_weights: "false"});
  assert.deepEqual(d.weights_select.shape, [1, 16384, 8]);
});
