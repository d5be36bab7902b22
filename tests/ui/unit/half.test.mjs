// Unit tests of web/attnd.js's float16 and bfloat16 decoders: every one of the 65536 codes of each
// format widened to float32 bit for bit as torch's .float() does (tests/data/half/widen.json, made by
// tests/torch/gen_half_widen.py), and the values checked once more against the formats' definitions.
import {test} from "node:test";
import assert from "node:assert/strict";
import {createHash} from "node:crypto";
import {readFileSync} from "node:fs";
import {float16Bits, float16ToFloat32, bfloat16ToFloat32, decodeTensor} from "../../../web/attnd.js";

const torch = JSON.parse(readFileSync(new URL("../../data/half/widen.json", import.meta.url), "utf8"));
const ALL = Uint16Array.from({length: 65536}, (_, i) => i);
const bitsOf = (f32) => new Uint32Array(f32.buffer, f32.byteOffset, f32.length);
const hex = (v, w) => `0x${v.toString(16).padStart(w, "0")}`;
const sha256 = (u32) => createHash("sha256").update(Buffer.from(u32.buffer, u32.byteOffset, u32.byteLength)).digest("hex");

test("float16: all 65536 codes widen exactly as torch's .float() (subnormals, signed zeros, NaNs made quiet)", () => {
  const out = bitsOf(float16ToFloat32(ALL));
  for (const [code, want] of torch.float16) // readable first: the values that go wrong first
    assert.equal(hex(out[Number(code)], 8), want, `float16 ${code}`);
  assert.equal(sha256(out), torch.float16_sha256);
});

test("bfloat16: all 65536 codes widen exactly as torch's .float()", () => {
  const out = bitsOf(bfloat16ToFloat32(ALL));
  for (const [code, want] of torch.bfloat16) assert.equal(hex(out[Number(code)], 8), want, `bfloat16 ${code}`);
  assert.equal(sha256(out), torch.bfloat16_sha256);
});

test("float16 values follow the format's definition: (-1)^s (1 + m/1024) 2^(e-15), subnormals m 2^-24", () => {
  const out = float16ToFloat32(ALL);
  let subnormals = 0;
  for (let h = 0; h < 65536; h++) {
    const s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    if (e === 31) {
      assert.ok(m ? Number.isNaN(out[h]) : out[h] === (s ? -Infinity : Infinity), hex(h, 4));
      continue;
    }
    const mag = e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15); // exact in float64
    if (e === 0 && m) subnormals++;
    assert.ok(Object.is(out[h], s ? -mag : mag), `${hex(h, 4)}: ${out[h]} != ${s ? -mag : mag}`);
  }
  assert.equal(subnormals, 2 * 1023);
  assert.equal(float16Bits(0x0001), 0x33800000); // 2^-24, the smallest subnormal
  assert.equal(float16Bits(0x03ff), 0x387fc000); // the largest subnormal, 1023 * 2^-24
});

test("bfloat16 values are the float32s whose low 16 bits are zero", () => {
  const out = bfloat16ToFloat32(ALL), bits = bitsOf(out);
  for (let h = 0; h < 65536; h++) assert.equal(bits[h], (h << 16) >>> 0);
  assert.equal(out[0x0001], 2 ** -133); // a bfloat16 subnormal
  assert.equal(out[0x3f80], 1);
});

test("base64 float16 and bfloat16 tensors decode through the same tables, and say what came", () => {
  const codes = Uint16Array.from([0x0001, 0x8000, 0x3555, 0x7bff, 0x7e01]);
  const b64 = Buffer.from(codes.buffer).toString("base64");
  const f = decodeTensor({shape: [5], dtype: "float16", base64: b64});
  assert.equal(f.dtype, "float32");
  assert.equal(f.wireDtype, "float16");
  assert.deepEqual(Array.from(bitsOf(f.data)), Array.from(codes, float16Bits));
  const b = decodeTensor({shape: [5], dtype: "bfloat16", base64: b64});
  assert.deepEqual(Array.from(bitsOf(b.data)), Array.from(codes, (c) => (c << 16) >>> 0));
  assert.throws(() => decodeTensor({shape: [3], dtype: "float16", base64: b64}), /needs 6/);
  // nested and flat carry the rounded values as decimals: float32s, read exactly
  const flat = decodeTensor({shape: [2], dtype: "float16", data: [0.333251953125, 5.960464477539063e-8]});
  assert.deepEqual(Array.from(bitsOf(flat.data)), [float16Bits(0x3555), float16Bits(0x0001)]);
  assert.equal(flat.wireDtype, "float16");
});
