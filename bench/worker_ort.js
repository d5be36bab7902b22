// worker_ort.js - ONNX Runtime (onnxruntime-node) as a contender of bench/compare.py: reads one
// command per line on stdin, answers one JSON line on stdout.
//
//   node bench/worker_ort.js ORT_MODULE_DIR
//   load DIR N L E H              the shape's files (bench/peer_models.py); drops earlier sessions
//   time VARIANT T SAMPLES        VARIANT: fused-nw0 | exported-nw0 | exported-nw1; T intra-op threads
//   quit
//
// Sessions are made as ONNX Runtime's documentation says it runs fastest on CPU:
// graphOptimizationLevel 'all', intraOpNumThreads = T, interOpNumThreads 1, executionMode
// 'sequential' (the other options at their defaults, e.g. intra-op spinning on). A session's first
// run is checked against torch's output (the checked rows, and for exported-nw1 the weights of batch
// 0, head 0) and its max |difference| returned as "check"; then SAMPLES samples are timed, each the
// mean of k back-to-back runs (k fixed per session so that a sample lasts about 50 ms), every
// output fetched. Answers {"ms": [...], "k": k, "check": {...}} or {"error": "..."}.
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');

const MODULES = path.resolve(process.argv[2]);
const ort = require(path.join(MODULES, 'onnxruntime-node'));

let shape = null; // {dir, N, L, E, H, x, rows, y, w}
const sessions = new Map(); // "variant/threads" -> {session, k, check}

function readF32(file) {
  const b = fs.readFileSync(file);
  return new Float32Array(b.buffer, b.byteOffset, b.length / 4);
}

function readI32(file) {
  const b = fs.readFileSync(file);
  return new Int32Array(b.buffer, b.byteOffset, b.length / 4);
}

function maxDiffRows(got, sh) {
  let d = 0;
  for (let i = 0; i < sh.rows.length; i++) {
    const g = sh.rows[i] * sh.E, r = i * sh.E;
    for (let j = 0; j < sh.E; j++) d = Math.max(d, Math.abs(got[g + j] - sh.y[r + j]));
  }
  return d;
}

async function session(variant, threads) {
  const key = variant + '/' + threads;
  if (sessions.has(key)) return sessions.get(key);
  const [kind, mode] = variant.split('-');
  const file = path.join(shape.dir, kind === 'fused' ? 'fused.onnx' : 'exported_' + mode + '.onnx');
  const s = await ort.InferenceSession.create(file, {
    graphOptimizationLevel: 'all', intraOpNumThreads: threads, interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  const feeds = {x: new ort.Tensor('float32', shape.x, [shape.N, shape.L, shape.E])};
  let t = process.hrtime.bigint();
  const out = await s.run(feeds);
  const once = Number(process.hrtime.bigint() - t) / 1e9;
  const check = {y: maxDiffRows(out.y.data, shape)};
  if (mode === 'nw1' && shape.w) { // weights [N,H,L,S]: batch 0, head 0 is the first L·S
    let d = 0;
    for (let i = 0; i < shape.w.length; i++) d = Math.max(d, Math.abs(out.w.data[i] - shape.w[i]));
    check.w = d;
  }
  t = process.hrtime.bigint();
  await s.run(feeds); // second run: warm, and a better guess of the time per run
  const warm = Math.min(once, Number(process.hrtime.bigint() - t) / 1e9);
  const k = Math.max(1, Math.min(10000, Math.round(0.05 / Math.max(warm, 1e-7))));
  const entry = {session: s, feeds, k, check};
  sessions.set(key, entry);
  return entry;
}

async function handle(words) {
  switch (words[0]) {
    case 'load': {
      for (const e of sessions.values()) await e.session.release();
      sessions.clear();
      shape = null;
      const [dir, N, L, E, H] = [words[1], ...words.slice(2, 6).map(Number)];
      const w = path.join(dir, 'w.f32');
      shape = {dir, N, L, E, H, x: readF32(path.join(dir, 'x.f32')), rows: readI32(path.join(dir, 'rows.i32')),
               y: readF32(path.join(dir, 'y.f32')), w: fs.existsSync(w) ? readF32(w) : null};
      return {ok: true};
    }
    case 'time': {
      if (!shape) return {error: 'no shape loaded'};
      const [variant, threads, samples] = [words[1], Number(words[2]), Number(words[3])];
      const e = await session(variant, threads);
      const ms = [];
      for (let i = 0; i < samples; i++) {
        const t = process.hrtime.bigint();
        for (let j = 0; j < e.k; j++) await e.session.run(e.feeds);
        ms.push(Number(process.hrtime.bigint() - t) / 1e6 / e.k);
      }
      return {ms, k: e.k, check: e.check};
    }
    default:
      return {error: 'unknown command ' + words[0]};
  }
}

(async () => {
  const pkg = require(path.join(MODULES, 'onnxruntime-node', 'package.json'));
  process.stdout.write(JSON.stringify({ready: true, version: pkg.version}) + '\n');
  const rl = readline.createInterface({input: process.stdin});
  for await (const line of rl) {
    const words = line.trim().split(/\s+/);
    if (words[0] === 'quit') break;
    let reply;
    try {
      reply = await handle(words);
    } catch (err) {
      reply = {error: String(err && err.message ? err.message : err).split('\n')[0]};
    }
    process.stdout.write(JSON.stringify(reply) + '\n');
  }
  process.exit(0);
})();
