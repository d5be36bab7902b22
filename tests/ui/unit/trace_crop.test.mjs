// Unit tests of web/view_trace.js's cropStage: a long input's stages drawn for the zoomed window.
import {test} from "node:test";
import assert from "node:assert/strict";
import {cropStage} from "../../../web/view_trace.js";
import {Stage} from "../../../web/attnd.js";

test("a trace stage cut to a window keeps its values and reads with the full pass's coordinates", () => {
  const [N, H, L, D] = [1, 2, 10, 3];
  const data = Float32Array.from({length: N * H * L * D}, (_, i) => i);
  const q = new Stage("q_heads", [N, H, L, D], ["N", "H", "L", "D"], data, true);
  const c = cropStage(q, {q: [4, 7], k: [0, 10]});
  assert.deepEqual(c.shape, [1, 2, 3, 3]);
  assert.deepEqual(c.fullShape, [1, 2, 10, 3]);
  for (let hh = 0; hh < H; hh++) for (let l = 4; l < 7; l++) for (let d = 0; d < D; d++) assert.equal(c.get({H: hh, L: l, D: d}), q.get({H: hh, L: l, D: d}));
  assert.equal(c.start("L"), 4);
  assert.equal(cropStage(q, null), q);
  assert.equal(cropStage(q, {q: [0, 10], k: [0, 5]}), q); // nothing to cut: no S axis, every L
  const sc = new Stage("scores", [1, 2, 3, 4], ["N", "H", "L", "S"], new Float32Array(24), true, {L: 4, S: 2, H: null});
  assert.equal(cropStage(sc, {q: [4, 7], k: [2, 6]}), sc); // already the window
});
