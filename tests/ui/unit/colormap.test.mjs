// Unit tests of web/colormap.js: the sequential maps get brighter all the way (so the brightest
// cell is the largest weight), and head colours are distinct.
import {test} from "node:test";
import assert from "node:assert/strict";
import {rgb, lut, luminance, headColours, hexRgb} from "../../../web/colormap.js";

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
