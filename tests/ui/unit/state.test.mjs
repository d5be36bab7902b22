// Unit tests of web/state.js: the URL holds the view, and malformed links fall back to defaults.
import {test} from "node:test";
import assert from "node:assert/strict";
import {parseState, stateQuery, DEFAULTS} from "../../../web/state.js";

test("the defaults make an empty query, and an empty query the defaults", () => {
  assert.equal(stateQuery(DEFAULTS), "");
  assert.deepEqual(parseState(""), {...DEFAULTS});
});

test("a state round-trips through its query string", () => {
  const s = {...DEFAULTS, layer: "gpt2.l3", view: "trace", q: "a b  c", k: "x y", seed: 7, scale: 2.5, pos: false,
             causal: true, pad: [1, 4], head: "mean", qi: 2, kj: 1, heads: [0, 3], cmp: 2, cmap: "cividis", vmax: "1", rpos: 5,
             log: true, gen: 8192, zq: [1024, 3072], zk: [0, 512], pop: "mean", topk: 16, tq: 1100};
  const q = stateQuery(s);
  assert.deepEqual(parseState(q), s);
  assert.deepEqual(parseState(new URLSearchParams(q)), s);
  assert.deepEqual(parseState(stateQuery({...DEFAULTS, causal: false, head: 0})), {...DEFAULTS, causal: false, head: 0});
});

test("malformed values fall back to their defaults", () => {
  const s = parseState("layer=../etc&view=nope&seed=-1&scale=abc&pad=1,x&head=-2&cmap=jet&vmax=2&causal=maybe&cmp=0");
  assert.deepEqual(s, {...DEFAULTS});
  assert.deepEqual(parseState("pad=3,1,3").pad, [1, 3]);
  assert.equal(parseState("layer=.hidden").layer, "");
});

test("the zoom window is written as start:stop and read back; malformed windows are dropped", () => {
  assert.equal(stateQuery({...DEFAULTS, view: "topk", gen: 8192, zq: [0, 2048], zk: [4096, 8192]}), "view=topk&gen=8192&zq=0%3A2048&zk=4096%3A8192");
  assert.deepEqual(parseState("zq=0:2048&zk=4096%3A8192"), {...DEFAULTS, zq: [0, 2048], zk: [4096, 8192]});
  assert.deepEqual(parseState("zq=5:5&zk=x&pop=min&gen=99999&topk=0"), {...DEFAULTS});
});
