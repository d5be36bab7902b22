// Unit tests of web/tokens.js: seeded token vectors and pasted inputs.
import {test} from "node:test";
import assert from "node:assert/strict";
import {splitTokens, tokenVector, embed, tokenInputs, parsePasted, squeeze, addPositions, generateTokens} from "../../../web/tokens.js";

test("the same word gives the same vector; another word, seed or stream another", () => {
  const a = tokenVector("cat", 64, 0), b = tokenVector("cat", 64, 0);
  assert.deepEqual(a, b);
  assert.notDeepEqual(a, tokenVector("dog", 64, 0));
  assert.notDeepEqual(a, tokenVector("cat", 64, 1));
  assert.notDeepEqual(a, tokenVector("cat", 64, 0, 1, 1));
  assert.deepEqual(tokenVector("cat", 8, 0, 2), tokenVector("cat", 8, 0, 1).map((v) => Math.fround(v * 2)));
});

test("token vectors look like N(0, 1) draws", () => {
  const v = tokenVector("statistics", 20000, 3);
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  const variance = v.reduce((a, b) => a + (b - mean) ** 2, 0) / v.length;
  assert.ok(Math.abs(mean) < 0.03, `mean ${mean}`);
  assert.ok(Math.abs(variance - 1) < 0.05, `variance ${variance}`);
  assert.ok(v.every(Number.isFinite));
});

test("splitTokens splits at white space", () => {
  assert.deepEqual(splitTokens("  the  cat\tsat\n"), ["the", "cat", "sat"]);
  assert.deepEqual(splitTokens(""), []);
});

test("embed places one vector per row, positions added on request", () => {
  const e = embed(["a", "b", "a"], 6, {seed: 2});
  assert.deepEqual(e.shape, [3, 6]);
  assert.deepEqual(e.data.subarray(0, 6), e.data.subarray(12, 18));
  const p = embed(["a", "b", "a"], 6, {seed: 2, positions: true});
  assert.notDeepEqual(p.data.subarray(0, 6), p.data.subarray(12, 18));
  const z = addPositions(new Float32Array(4), 2, 2);
  assert.deepEqual(Array.from(z), [0, 1, Math.fround(Math.sin(1)), Math.fround(Math.cos(1))]);
});

test("tokenInputs: self-attention sends the query only; kdim/vdim and cross-attention send keys and values", () => {
  const self = tokenInputs({embed_dim: 8, kdim: 8, vdim: 8}, ["a", "b"], []);
  assert.deepEqual(self.query.shape, [2, 8]);
  assert.equal(self.key, undefined);
  assert.deepEqual(self.keyTokens, ["a", "b"]);
  const cross = tokenInputs({embed_dim: 8, kdim: 8, vdim: 8}, ["a"], ["x", "y", "z"]);
  assert.deepEqual(cross.key.shape, [3, 8]);
  assert.equal(cross.value, undefined);
  const kv = tokenInputs({embed_dim: 8, kdim: 4, vdim: 6}, ["a", "b"], []);
  assert.deepEqual(kv.key.shape, [2, 4]);
  assert.deepEqual(kv.value.shape, [2, 6]);
  assert.deepEqual(kv.keyTokens, ["a", "b"]);
});

test("parsePasted takes nested arrays, tensor objects and {query, key, value}", () => {
  assert.deepEqual(parsePasted("[[1, 2], [3, 4]]").query, {data: Float32Array.from([1, 2, 3, 4]), shape: [2, 2]});
  assert.deepEqual(parsePasted("[[[1, 2, 3]]]").query.shape, [1, 3]);
  assert.deepEqual(parsePasted('{"shape": [1, 2], "data": [5, 6]}').query.data, Float32Array.from([5, 6]));
  const both = parsePasted('{"query": [[1, 2]], "key": [[3], [4]]}');
  assert.deepEqual(both.key.shape, [2, 1]);
});

test("parsePasted says what is wrong", () => {
  assert.throws(() => parsePasted("[[1, 2], [3]]"), /ragged/);
  assert.throws(() => parsePasted("[[1, \"x\"]]"), /not a finite number/);
  assert.throws(() => parsePasted("{not json"), /not JSON/);
  assert.throws(() => parsePasted('{"key": [[1]]}'), /"query"/);
  assert.throws(() => parsePasted('{"query": [[1]], "quer": 1}'), /unknown member "quer"/);
  assert.throws(() => parsePasted("[1, 2, 3]"), /not \[rows, features\]/);
  assert.throws(() => squeeze({data: new Float32Array(0), shape: [0, 3]}), /empty/);
});

test("generated tokens: the same count and seed, the same words; words repeat as in text", () => {
  const a = generateTokens(8192, 0);
  assert.equal(a.length, 8192);
  assert.deepEqual(a, generateTokens(8192, 0));
  assert.notDeepEqual(a.slice(0, 50), generateTokens(50, 1));
  assert.deepEqual(generateTokens(10, 0), a.slice(0, 10)); // a longer input extends a shorter one
  const distinct = new Set(a).size;
  assert.ok(distinct > 500 && distinct < 4096, `${distinct} distinct words`);
  assert.ok(a.every((w) => /^[a-z]{4,6}$/.test(w)));
  // the embedding of generated words is the embedding of the same words typed
  const e = embed(a.slice(0, 300), 16, {seed: 4, positions: true});
  const typed = embed(splitTokens(a.slice(0, 300).join(" ")), 16, {seed: 4, positions: true});
  assert.deepEqual(e, typed);
  assert.deepEqual(e.data.subarray(16 * 7, 16 * 8), addPositions(tokenVector(a[7], 16, 4), 1, 16, 7));
});
