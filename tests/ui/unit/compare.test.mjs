// Unit tests of web/view_compare.js's arithmetic: the head counts a weight set can be served with,
// and the config of the comparison layer.
import {test} from "node:test";
import assert from "node:assert/strict";
import {otherHeadCounts, comparisonName, comparisonConfig} from "../../../web/view_compare.js";

test("the comparison config follows num_heads where the daemon spells out what derives from it", () => {
  const written = {embed_dim: 64, num_heads: 4, kdim: 64, vdim: 64, bias: true, head_dim: 16, num_kv_heads: 4, rope: null, is_causal: false};
  assert.deepEqual(comparisonConfig(written, 2), {...written, num_heads: 2, head_dim: 32, num_kv_heads: 2});
  const bare = {embed_dim: 64, num_heads: 4};
  assert.deepEqual(comparisonConfig(bare, 1), {embed_dim: 64, num_heads: 1});
  assert.deepEqual(otherHeadCounts(12, 4), [1, 2, 3, 6, 12]);
  assert.equal(comparisonName("x".repeat(64), 16), "x".repeat(60) + ".h16");
});
