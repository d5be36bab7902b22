// Unit tests of web/deepzoom.js: the window of a long input's map, its pooling, zoom and pan steps.
import {test} from "node:test";
import assert from "node:assert/strict";
import {MIN_SPAN, wholeWindow, clampWindow, isWhole, poolFor, pooledShape, blockOf, windowOfCells, zoomAt, pan, emptyBlocks, rangeText, parseRange}
  from "../../../web/deepzoom.js";

test("the pool fits the window in the canvas: ⌈span / cells⌉ per axis, single cells once it fits", () => {
  const w = wholeWindow(8192, 8192);
  assert.deepEqual(poolFor(w, 512), [16, 16]);
  assert.deepEqual(pooledShape(w, [16, 16]), [512, 512]);
  assert.deepEqual(poolFor({q: [0, 1000], k: [0, 100]}, 512), [2, 1]);
  assert.deepEqual(pooledShape({q: [0, 1000], k: [0, 100]}, [2, 1]), [500, 100]);
  assert.deepEqual(poolFor({q: [10, 20], k: [0, 512]}, 512), [1, 1]);
  assert.deepEqual(pooledShape({q: [0, 8191], k: [0, 8191]}, [16, 16]), [512, 512]); // the edge block is partial
  assert.deepEqual(poolFor({q: [0, 300], k: [0, 9000]}, 128, 256), [3, 36]);
});

test("a drawn cell stands for its block of queries and keys, edge blocks cut at the window", () => {
  const w = {q: [100, 150], k: [0, 1000]}, pool = [16, 300];
  assert.deepEqual(blockOf(w, pool, 0, 0), {q: [100, 116], k: [0, 300]});
  assert.deepEqual(blockOf(w, pool, 3, 3), {q: [148, 150], k: [900, 1000]});
  assert.deepEqual(windowOfCells(w, pool, 2, 3, 1, 1), {q: [116, 148], k: [300, 1000]});
});

test("zooming keeps the point under the pointer in place, and stays inside the map", () => {
  const whole = wholeWindow(8192, 8192);
  const z = zoomAt(whole, 8192, 8192, 2, 2048, 6144);
  assert.deepEqual(z, {q: [1024, 5120], k: [3072, 7168]});
  assert.deepEqual(zoomAt(z, 8192, 8192, 0.5, 2048, 6144), whole);
  assert.deepEqual(zoomAt(whole, 8192, 8192, 2), {q: [2048, 6144], k: [2048, 6144]}); // around the middle
  assert.deepEqual(zoomAt(whole, 8192, 8192, 4, 0, 8191.5), {q: [0, 2048], k: [6144, 8192]}); // pinned to the edges
  const tiny = zoomAt({q: [0, 10], k: [5, 15]}, 8192, 8192, 2, 3, 7);
  assert.deepEqual([tiny.q[1] - tiny.q[0], tiny.k[1] - tiny.k[0]], [MIN_SPAN, MIN_SPAN]);
  assert.deepEqual(zoomAt({q: [0, 5], k: [0, 5]}, 5, 5, 2), {q: [0, 5], k: [0, 5]}); // an axis shorter than MIN_SPAN
  assert.deepEqual(zoomAt({q: [0, 8], k: [0, 8]}, 100, 100, 0.25, 4, 4), {q: [0, 32], k: [0, 32]});
});

test("panning moves by parts of the window and stops at the map's edges", () => {
  const w = {q: [1000, 2000], k: [0, 500]};
  assert.deepEqual(pan(w, 8192, 8192, 0.5, 0), {q: [1500, 2500], k: [0, 500]});
  assert.deepEqual(pan(w, 8192, 8192, 0, -0.5), w);
  assert.deepEqual(pan(w, 2100, 8192, 1, 1), {q: [1100, 2100], k: [500, 1000]});
});

test("windows from links are clamped into the map, at least MIN_SPAN a side", () => {
  assert.deepEqual(clampWindow({q: [0, 9000], k: [100, 101]}, 8192, 4096), {q: [0, 8192], k: [97, 105]});
  assert.deepEqual(clampWindow({q: [8190, 8200], k: [0, 3]}, 8192, 4), {q: [8184, 8192], k: [0, 4]});
  assert.ok(isWhole(clampWindow({q: [0, 99999], k: [0, 99999]}, 64, 64), 64, 64));
  assert.deepEqual(parseRange(rangeText([12, 340])), [12, 340]);
  for (const bad of ["", "5:5", "9:2", "-1:4", "1:x", "1:2:3", "0:1234567890"]) assert.equal(parseRange(bad), null, bad);
});

test("a drawn cell is empty when every cell of its block is masked (causal, padding), never for appended keys", () => {
  // 8 queries x 8 keys pooled 2 x 2: causal leaves blocks strictly above the diagonal empty
  const e = emptyBlocks({q: [0, 8], k: [0, 8]}, [2, 2], {causal: true, S0: 8});
  assert.deepEqual(Array.from(e), [0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
  // single cells: exactly j > i
  const one = emptyBlocks({q: [3, 6], k: [2, 7]}, [1, 1], {causal: true, S0: 100});
  for (let r = 0; r < 3; r++) for (let c = 0; c < 5; c++) assert.equal(one[r * 5 + c], 2 + c > 3 + r ? 1 : 0);
  // padding: a column is empty when all its keys are padded; keys past S0 (bias_k) never are
  const p = emptyBlocks({q: [0, 2], k: [0, 6]}, [2, 2], {pad: [0, 1, 2, 4, 5], S0: 5});
  assert.deepEqual(Array.from(p), [1, 0, 0]);
  assert.deepEqual(Array.from(emptyBlocks({q: [0, 4], k: [0, 4]}, [2, 2])), [0, 0, 0, 0]);
});
