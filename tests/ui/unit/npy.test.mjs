// Unit tests of web/npy.js: .npy files written here byte by byte, as numpy writes them.
import {test} from "node:test";
import assert from "node:assert/strict";
import {parseNpy} from "../../../web/npy.js";

function npy(descr, shape, payload, {fortran = false, version = 1} = {}) {
  let header = `{'descr': '${descr}', 'fortran_order': ${fortran ? "True" : "False"}, 'shape': (${shape.join(", ")}${shape.length === 1 ? "," : ""}), }`;
  const pre = version === 1 ? 10 : 12;
  header += " ".repeat(63 - ((pre + header.length) % 64)) + "\n";
  const out = new Uint8Array(pre + header.length + payload.byteLength);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, version, 0]);
  const dv = new DataView(out.buffer);
  if (version === 1) dv.setUint16(8, header.length, true);
  else dv.setUint32(8, header.length, true);
  out.set(new TextEncoder().encode(header), pre);
  out.set(new Uint8Array(payload.buffer, payload.byteOffset, payload.byteLength), pre + header.length);
  return out;
}

test("float32, C order", () => {
  const r = parseNpy(npy("<f4", [2, 3], Float32Array.from([1, 2, 3, 4, 5, 6.5])));
  assert.deepEqual(r.shape, [2, 3]);
  assert.deepEqual(r.data, Float32Array.from([1, 2, 3, 4, 5, 6.5]));
});

test("big-endian float64, int64, bool, float16, version 2", () => {
  const be = new DataView(new ArrayBuffer(16));
  be.setFloat64(0, 0.1, false);
  be.setFloat64(8, -2, false);
  assert.deepEqual(parseNpy(npy(">f8", [2], new Uint8Array(be.buffer))).data, Float32Array.from([0.1, -2]));
  assert.deepEqual(parseNpy(npy("<i8", [2], BigInt64Array.from([7n, -3n]))).data, Float32Array.from([7, -3]));
  assert.deepEqual(parseNpy(npy("|b1", [3], Uint8Array.from([1, 0, 1]))).data, Float32Array.from([1, 0, 1]));
  assert.deepEqual(parseNpy(npy("<f2", [1], Uint16Array.from([0x3c00]), {version: 2})).data, Float32Array.from([1]));
});

test("Fortran order is turned into C order", () => {
  // the matrix [[1, 2, 3], [4, 5, 6]] stored column by column
  const r = parseNpy(npy("<f4", [2, 3], Float32Array.from([1, 4, 2, 5, 3, 6]), {fortran: true}));
  assert.deepEqual(r.data, Float32Array.from([1, 2, 3, 4, 5, 6]));
});

test("damaged files are refused with the reason", () => {
  assert.throws(() => parseNpy(new Uint8Array(20)), /magic/);
  const good = npy("<f4", [4], new Float32Array(4));
  assert.throws(() => parseNpy(good.subarray(0, good.length - 4)), /needs 16/);
  assert.throws(() => parseNpy(npy("<c8", [1], new Float32Array(2))), /not supported/);
  const bad = npy("<f4", [1], new Float32Array(1));
  new DataView(bad.buffer).setUint16(8, 60000, true);
  assert.throws(() => parseNpy(bad), /past the end/);
});
