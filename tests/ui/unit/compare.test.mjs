// Unit tests of web/view_compare.js's arithmetic: the head counts a weight set can be served with,
// and the name of the comparison layer.
import {test} from "node:test";
import assert from "node:assert/strict";
import {otherHeadCounts, comparisonName} from "../../../web/view_compare.js";

test("the other head counts are E's divisors; the comparison layer's name stays within 64 characters", () => {
  assert.deepEqual(otherHeadCounts(12, 4), [1, 2, 3, 6, 12]);
  assert.deepEqual(otherHeadCounts(7, 7), [1]);
  assert.equal(comparisonName("demo", 2), "demo.h2");
  assert.equal(comparisonName("x".repeat(64), 16), "x".repeat(60) + ".h16");
});
