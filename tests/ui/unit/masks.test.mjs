// Unit tests of web/masks.js under node's test runner: the cells the viewer draws as masked follow
// docs/api.md's rule (is_causal: p_j <= p_i; a window W: |p_i - p_j| < W, with is_causal
// 0 <= p_i - p_j < W; padded keys; appended keys never), and a pooled block is masked exactly when
// every cell in it is (deepzoom.js's emptyBlocks, checked cell by cell).
import {test} from "node:test";
import assert from "node:assert/strict";
import {allowedDiffs, cellMasked, blockMaskedByPosition} from "../../../web/masks.js";
import {emptyBlocks, blockOf, pooledShape} from "../../../web/deepzoom.js";

/** docs/api.md's rule, written out for one cell. */
function ruleMasked({causal, window, pad, S0, qoff = 0, koff = 0}, i, j) {
  if (j >= S0) return false;
  if (pad.includes(j)) return true;
  const pi = qoff + i, pj = koff + j;
  if (causal && pj > pi) return true;
  if (window && Math.abs(pi - pj) >= window) return true;
  return false;
}

const inputs = [];
for (const causal of [false, true])
  for (const window of [null, 1, 3, 7])
    for (const [qoff, koff] of [[0, 0], [5, 5], [5, 0], [0, 4]])
      for (const pad of [[], [2], [0, 1, 5]])
        inputs.push({causal, window, qoff, koff, pad, S0: 9});

test("allowedDiffs: the ranges of p_i - p_j each mask keeps", () => {
  assert.deepEqual(allowedDiffs({causal: false, window: null}), [-Infinity, Infinity]);
  assert.deepEqual(allowedDiffs({causal: true, window: null}), [0, Infinity]);
  assert.deepEqual(allowedDiffs({causal: false, window: 4}), [-3, 3]);
  assert.deepEqual(allowedDiffs({causal: true, window: 4}), [0, 3]);
});

test("cellMasked follows docs/api.md's rule for every cell, offsets and padding", () => {
  for (const input of inputs)
    for (let i = 0; i < 11; i++)
      for (let j = 0; j < 11; j++) /* j >= 9: keys appended by add_bias_kv / add_zero_attn */
        assert.equal(cellMasked(input, i, j), ruleMasked(input, i, j), JSON.stringify({input, i, j}));
});

test("a pooled block is empty exactly when every cell of it is masked", () => {
  for (const input of inputs)
    for (const win of [{q: [0, 11], k: [0, 11]}, {q: [2, 9], k: [1, 10]}])
      for (const pool of [[1, 1], [2, 3], [4, 4], [11, 11]]) {
        const e = emptyBlocks(win, pool, input);
        const [rows, cols] = pooledShape(win, pool);
        for (let r = 0; r < rows; r++)
          for (let c = 0; c < cols; c++) {
            const {q, k} = blockOf(win, pool, r, c);
            let all = true;
            for (let i = q[0]; all && i < q[1]; i++)
              for (let j = k[0]; all && j < k[1]; j++) all = ruleMasked(input, i, j);
            assert.equal(e[r * cols + c], all ? 1 : 0, JSON.stringify({input, win, pool, r, c}));
          }
      }
});

test("blockMaskedByPosition leaves padding to the caller", () => {
  const input = {causal: true, window: 2, S0: 10, pad: [3], qoff: 0, koff: 0};
  assert.equal(blockMaskedByPosition(input, [0, 1], [3, 4]), true); /* later key */
  assert.equal(blockMaskedByPosition(input, [5, 6], [3, 4]), true); /* outside the window */
  assert.equal(blockMaskedByPosition(input, [4, 5], [3, 4]), false); /* padded, but in the window */
});
