// Unit tests of web/format.js: numbers written as the daemon writes them (shortest float32).
import {test} from "node:test";
import assert from "node:assert/strict";
import {f32, short, shapeText} from "../../../web/format.js";

test("f32 writes the daemon's style: plain for exponents -4..8, else d.ddde<exp>", () => {
  const cases = [[1, "1"], [0.1, "0.1"], [123.5, "123.5"], [0.0001, "0.0001"], [100000000, "100000000"],
                 [1e-7, "1e-7"], [3.4028234663852886e38, "3.4028235e38"], [1e9, "1e9"], [6.954237e-5, "6.954237e-5"],
                 [-0.01673351, "-0.01673351"], [0.33786982, "0.33786982"], [-1.1754944e-38, "-1.1754944e-38"],
                 [0, "0"], [-0, "-0"], [-Infinity, "-inf"], [2 ** -149, "1e-45"], [16777216, "16777216"]];
  for (const [x, want] of cases) assert.equal(f32(x), want, `f32(${x})`);
});

test("f32 reads back as the same float32 and no shorter decimal would (random bit patterns)", () => {
  const u = new Uint32Array(1), f = new Float32Array(u.buffer);
  let seed = 12345;
  for (let n = 0; n < 20000; n++) {
    seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
    u[0] = seed;
    const x = f[0];
    if (!Number.isFinite(x)) continue;
    const s = f32(x);
    assert.equal(Math.fround(Number(s)), x, `${s} for bits ${seed.toString(16)}`);
    const digits = s.replace(/^-/, "").replace(/e.*$/, "").replace(".", "").replace(/^0+/, "").replace(/0+$/, "").length;
    if (digits > 1) assert.notEqual(Math.fround(Number(x.toPrecision(digits - 1))), x, `shorter than ${s} exists`);
  }
});

test("short and shapeText", () => {
  assert.equal(short(0.123456), "0.123");
  assert.equal(short(12345.6), "1.23e4");
  assert.equal(shapeText([1, 4, 6, 16], ["N", "H", "L", "D"]), "[N=1, H=4, L=6, D=16]");
  assert.equal(shapeText([2, 3]), "[2, 3]");
});
