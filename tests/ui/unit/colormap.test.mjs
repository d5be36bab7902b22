// Unit tests of web/colormap.js: the sequential maps get brighter all the way (so the brightest
// cell is the largest weight), and head colours are distinct.
import {test} from "node:test";
import assert from "node:assert/strict";
import {rgb, lut, luminance, headColours, hexRgb, colourIndex, LOG_DECADES} from "../../../web/colormap.js";

for (const name of ["viridis", "cividis"])
  test(`${name}: luminance grows over the 256 colours drawn (strictly, two steps apart)`, () => {
    const l = Array.from({length: 256}, (_, i) => luminance(rgb(name, i / 255)));
    for (let i = 1; i < 256; i++) assert.ok(l[i] >= l[i - 1], `${name}[${i}] luminance ${l[i]} after ${l[i - 1]}`);
    for (let i = 2; i < 256; i++) assert.ok(l[i] > l[i - 2], `${name}[${i}] luminance ${l[i]} not above [${i - 2}]`);
  });

test("the ImageData table holds the same colours, RGBA in memory order", () => {
  const t = lut("viridis");
  for (const i of [0, 77, 255]) {
    const bytes = new Uint8Array(Uint32Array.of(t[i]).buffer);
    assert.deepEqual(Array.from(bytes), [...rgb("viridis", i / 255), 255]);
  }
  assert.deepEqual(rgb("viridis", 0), [0x44, 0x01, 0x54]);
  assert.deepEqual(rgb("viridis", 1), [0xfd, 0xe7, 0x25]);
});

test("the diverging map is neutral in the middle", () => {
  assert.deepEqual(rgb("diverging", 0.5), hexRgb("#f7f7f7"));
});

test("head colours are distinct for any number of heads", () => {
  for (const H of [1, 4, 7, 8, 12, 16, 32]) {
    const c = headColours(H);
    assert.equal(c.length, H);
    assert.equal(new Set(c).size, H);
    assert.ok(c.every((x) => /^#[0-9a-f]{6}$/.test(x)));
  }
});

test("colourIndex: 256 steps, linear from lo to hi, or logarithmic over LOG_DECADES below hi", () => {
  assert.equal(colourIndex(0, 0, 1), 0);
  assert.equal(colourIndex(1, 0, 1), 255);
  assert.equal(colourIndex(0.5, 0, 1), 128); // 127.5 rounds up
  assert.equal(colourIndex(-3, 0, 1), 0);
  assert.equal(colourIndex(7, 0, 1), 255);
  assert.equal(colourIndex(0.25, 0, 0.5), 128);
  assert.equal(colourIndex(5, 5, 5), 0); // an empty range: the bottom colour
  // logarithmic: each decade a quarter of the steps
  assert.equal(LOG_DECADES, 4);
  assert.equal(colourIndex(0.02, 0, 0.02, true), 255);
  assert.equal(colourIndex(0.002, 0, 0.02, true), 191); // 3/4 of 255 = 191.25
  assert.equal(colourIndex(0.00002, 0, 0.02, true), 64); // 63.75
  assert.equal(colourIndex(0.000002, 0, 0.02, true), 0);
  assert.equal(colourIndex(1e-30, 0, 0.02, true), 0);
  assert.equal(colourIndex(0, 0, 0.02, true), 0);
  let last = -1; // monotone
  for (let e = -7; e <= 0; e += 0.01) {
    const i = colourIndex(10 ** e, 0, 1, true);
    assert.ok(i >= last);
    last = i;
  }
});
