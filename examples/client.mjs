// client.mjs - attnd from JavaScript with fetch: Node 18 and later, or a browser page (start attnd
// with --cors-origin naming the page's origin).
//
// Creates a layer from attnd's seeded initialisation, runs one forward pass with nested JSON and
// the same with base64 Float32Arrays (they must agree bit for bit), checks that each head's weights
// are a softmax (rows sum to 1), asks the trace for two stages and reads them by axis name, and
// deletes the layer.
//
//     node examples/client.mjs [URL]        // default $ATTND_URL, else http://localhost:8080
//
// Exits 0 and prints "N passed, 0 failed" when every check holds.

const URL = process.argv[2] ?? process.env.ATTND_URL ?? "http://localhost:8080";
const LAYER = `${URL}/v1/layers/example-js`;
let passed = 0, failed = 0;
const check = (ok, what) => { ok ? passed++ : failed++; console.log(`${ok ? "ok  " : "FAIL"} ${what}`); };

// Every error is JSON: {"error": {"code", "message", "field"}, "request_id"}.
async function call(method, url, body) {
  const res = await fetch(url, {method, headers: body ? {"Content-Type": "application/json"} : {},
                                body: body && JSON.stringify(body)});
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${method} ${url}: ${res.status} ${json.error.message} (request ${json.request_id})`);
  return json;
}

// A Float32Array as attnd's base64 tensor (little-endian float32, as x86 and ARM store it).
// In a browser: btoa(String.fromCharCode(...new Uint8Array(a.buffer))) for small arrays.
const b64 = (a, shape) => ({shape, dtype: "float32", base64: Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("base64")});
const fromB64 = (t) => new Float32Array(new Uint8Array(Buffer.from(t.base64, "base64")).buffer);

const E = 16, H = 4, L = 6;
const info = await call("PUT", LAYER, {config: {embed_dim: E, num_heads: H}, init: {method: "xavier_uniform", seed: 1}});
check(info.config.batch_first === true, `PUT example-js: ${info.parameter_count} parameters, batch_first ${info.config.batch_first}`);

// one sequence of L tokens, batch-first: [N=1, L, E]
const rows = Array.from({length: L}, (_, i) => Array.from({length: E}, (_, e) => Math.fround(Math.sin(i * E + e))));
const nested = await call("POST", `${LAYER}/forward`, {query: [rows], need_weights: true, average_attn_weights: false});
check(nested.output.length === 1 && nested.output[0].length === L && nested.attn_weights[0].length === H,
      "forward (nested JSON): output [1, L, E], weights [1, H, L, S]");

const flat = new Float32Array(rows.flat());
const bin = await call("POST", `${LAYER}/forward`, {query: b64(flat, [1, L, E]), need_weights: true,
                                                   average_attn_weights: false, encoding: "base64"});
const out = fromB64(bin.output), w = fromB64(bin.attn_weights);
check(out.every((v, i) => v === Math.fround(nested.output.flat(2)[i])),
      "forward (base64 Float32Array): the same output, bit for bit");
let worst = 0;
for (let r = 0; r < H * L; r++) {
  let sum = 0;
  for (let s = 0; s < L; s++) sum += w[r * L + s];
  worst = Math.max(worst, Math.abs(sum - 1));
}
check(worst < 1e-5, `every head's weights are a softmax: rows sum to 1 (within ${worst.toExponential(1)})`);

const trace = await call("POST", `${LAYER}/trace`, {query: [rows], stages: ["attn_weights", "q_heads"], average_attn_weights: false});
check(trace.stages.map((s) => s.name).join() === "q_heads,attn_weights", "trace: only the stages asked, in pipeline order");
// read a stage by axis name: the axes say which dimension is which, whatever the layout
const at = (stage, coords) => stage.axes.reduce((i, a, d) => i * stage.shape[d] + (coords[a] ?? 0), 0);
const tw = trace.stages[1], flatW = tw.tensor.flat(Infinity);
check(tw.axes.join("") === "NHLS" && Math.fround(flatW[at(tw, {N: 0, H: 2, L: 3, S: 1})]) === w[(2 * L + 3) * L + 1],
      `the trace's attn_weights (axes ${tw.axes.join(" ")}) read by axis name are forward's`);

await call("DELETE", LAYER);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
