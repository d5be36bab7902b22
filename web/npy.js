// npy.js - NumPy's .npy files (format versions 1-3) read into a Float32Array.
// Floats (f2, f4, f8), integers (i1..i8, u1..u8) and bool, either byte order, C or Fortran order.

const WIDTH = {b1: 1, i1: 1, u1: 1, i2: 2, u2: 2, f2: 2, i4: 4, u4: 4, f4: 4, i8: 8, u8: 8, f8: 8};

/** {data: Float32Array, shape} of the bytes of a .npy file; throws an Error naming the problem. */
export function parseNpy(buffer) {
  const bytes = buffer instanceof Uint8Array ? buffer : new Uint8Array(buffer);
  const magic = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
  if (bytes.length < 10 || magic.some((b, i) => bytes[i] !== b)) throw new Error("not a .npy file (no \\x93NUMPY magic)");
  const major = bytes[6];
  if (major < 1 || major > 3) throw new Error(`unknown .npy version ${major}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  if (start + headerLen > bytes.length) throw new Error(".npy header runs past the end of the file");
  const header = new TextDecoder(major === 3 ? "utf-8" : "latin1").decode(bytes.subarray(start, start + headerLen));

  const descr = /'descr'\s*:\s*'([<>|=])([a-z])(\d+)'/.exec(header);
  const fortran = /'fortran_order'\s*:\s*(True|False)/.exec(header);
  const shapeM = /'shape'\s*:\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shapeM) throw new Error(`.npy header not understood: ${header.trim().slice(0, 120)}`);
  const kind = descr[2] + descr[3];
  const width = WIDTH[kind];
  if (!width) throw new Error(`dtype ${descr[1]}${kind} is not supported (floats, integers, bool)`);
  const little = descr[1] !== ">";
  const shape = shapeM[1].split(",").map((s) => s.trim()).filter((s) => s).map(Number);
  if (shape.some((d) => !Number.isInteger(d) || d < 0)) throw new Error(`bad shape (${shapeM[1]})`);
  const n = shape.reduce((a, b) => a * b, 1);
  const off = start + headerLen;
  if (off + n * width > bytes.length) throw new Error(`the file holds ${bytes.length - off} data bytes, shape (${shape}) needs ${n * width}`);

  const data = new Float32Array(n);
  const read = {
    b1: (o) => (view.getUint8(o) ? 1 : 0), u1: (o) => view.getUint8(o), i1: (o) => view.getInt8(o),
    i2: (o) => view.getInt16(o, little), u2: (o) => view.getUint16(o, little),
    i4: (o) => view.getInt32(o, little), u4: (o) => view.getUint32(o, little),
    i8: (o) => Number(view.getBigInt64(o, little)), u8: (o) => Number(view.getBigUint64(o, little)),
    f2: (o) => half(view.getUint16(o, little)), f4: (o) => view.getFloat32(o, little), f8: (o) => view.getFloat64(o, little),
  }[kind];
  for (let i = 0; i < n; i++) data[i] = read(off + i * width);
  return {data: fortran[1] === "True" ? toC(data, shape) : data, shape};
}

function half(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, m = h & 1023;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

// Fortran (column-major) order to C (row-major) order, any rank.
function toC(src, shape) {
  const n = src.length, out = new Float32Array(n), rank = shape.length;
  const idx = new Array(rank).fill(0);
  for (let c = 0; c < n; c++) {
    let f = 0, stride = 1;
    for (let d = 0; d < rank; d++) {
      f += idx[d] * stride;
      stride *= shape[d];
    }
    out[c] = src[f];
    for (let d = rank - 1; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}
