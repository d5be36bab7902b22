// deepzoom.js - the part of a long input's attention map that the viewer shows (a window of
// queries × keys) and the pooling that fits it to a canvas, as map services serve tiles: only
// the visible range is asked for, at the resolution the canvas needs, down to single cells.
// DOM-free: the arithmetic of windows, blocks and zoom steps (unit-tested under node).
//
// A window is {q: [q0, q1], k: [k0, k1]}: half-open ranges of query rows and key columns, as
// weights_select's "queries" and "keys". A pool [a, b] makes each drawn cell the mean or max of
// a queries × b keys (edge blocks partial), as weights_select's "pool".

import {blockMaskedByPosition} from "./masks.js";

/** The smallest window side, in cells (or the whole axis when it is shorter). */
export const MIN_SPAN = 8;

/** The whole map of L queries and S keys. */
export function wholeWindow(L, S) {
  return {q: [0, L], k: [0, S]};
}

function clampRange([a, b], n) {
  const min = Math.min(MIN_SPAN, n);
  let lo = Math.max(0, Math.min(Math.floor(a), n)), hi = Math.max(0, Math.min(Math.ceil(b), n));
  if (hi - lo < min) { // too small (or reversed): grow around its middle, inside the axis
    const mid = (lo + hi) / 2;
    lo = Math.max(0, Math.min(n - min, Math.round(mid - min / 2)));
    hi = lo + min;
  }
  return [lo, hi];
}

/** A window inside [0, L) × [0, S), each side at least MIN_SPAN long (or the whole axis). */
export function clampWindow(win, L, S) {
  return {q: clampRange(win.q, L), k: clampRange(win.k, S)};
}

/** Whether the window is the whole map. */
export function isWhole(win, L, S) {
  return win.q[0] === 0 && win.q[1] === L && win.k[0] === 0 && win.k[1] === S;
}

/** The pool [a, b] that fits the window in maxRows × maxCols cells: ⌈span / max⌉ on each axis. */
export function poolFor(win, maxRows, maxCols = maxRows) {
  return [Math.max(1, Math.ceil((win.q[1] - win.q[0]) / maxRows)), Math.max(1, Math.ceil((win.k[1] - win.k[0]) / maxCols))];
}

/** Rows and columns of the pooled map: [⌈Lw / a⌉, ⌈Sw / b⌉]. */
export function pooledShape(win, [a, b]) {
  return [Math.ceil((win.q[1] - win.q[0]) / a), Math.ceil((win.k[1] - win.k[0]) / b)];
}

/** The queries and keys that drawn cell (r, c) stands for: {q: [i0, i1], k: [j0, j1]}. */
export function blockOf(win, [a, b], r, c) {
  const i0 = win.q[0] + r * a, j0 = win.k[0] + c * b;
  return {q: [i0, Math.min(win.q[1], i0 + a)], k: [j0, Math.min(win.k[1], j0 + b)]};
}

/** The window that the drawn cells (r0, c0) .. (r1, c1) cover (corners in any order, inclusive). */
export function windowOfCells(win, pool, r0, c0, r1, c1) {
  const a = blockOf(win, pool, Math.min(r0, r1), Math.min(c0, c1)), z = blockOf(win, pool, Math.max(r0, r1), Math.max(c0, c1));
  return {q: [a.q[0], z.q[1]], k: [a.k[0], z.k[1]]};
}

/**
 * The window zoomed by factor f (2: in, twice as close; 0.5: out) around the point (qc, kc) in
 * query and key coordinates (fractional allowed), which stays where it was on the canvas.
 */
export function zoomAt(win, L, S, f, qc = (win.q[0] + win.q[1]) / 2, kc = (win.k[0] + win.k[1]) / 2) {
  const axis = ([lo, hi], n, c) => {
    const span = Math.max(Math.min(MIN_SPAN, n), Math.min(n, Math.round((hi - lo) / f)));
    const t = hi > lo ? (c - lo) / (hi - lo) : 0.5; // where the point sits in the window, 0..1
    const start = Math.round(c - t * span);
    const s = Math.max(0, Math.min(n - span, start));
    return [s, s + span];
  };
  return {q: axis(win.q, L, qc), k: axis(win.k, S, kc)};
}

/** The window moved by dq and dk of its own size (0.5: half a window down or right), inside the map. */
export function pan(win, L, S, dq, dk) {
  const axis = ([lo, hi], n, d) => {
    const span = hi - lo, s = Math.max(0, Math.min(n - span, lo + Math.round(d * span)));
    return [s, s + span];
  };
  return {q: axis(win.q, L, dq), k: axis(win.k, S, dk)};
}

/**
 * Which drawn cells are empty because every cell they stand for is masked: by is_causal and the
 * layer's window, by position (queries at qoff + i, keys at koff + j: masks.js), or padded keys.
 * Keys at S0 and beyond (appended by add_bias_kv / add_zero_attn) are never masked. Returns a
 * Uint8Array [rows * cols], 1 = empty.
 */
export function emptyBlocks(win, pool, {causal = false, pad = [], S0 = Infinity, window = null, qoff = 0, koff = 0} = {}) {
  const [rows, cols] = pooledShape(win, pool);
  const out = new Uint8Array(rows * cols);
  if (!causal && !window && !pad.length) return out;
  const input = {causal, window, S0, qoff, koff};
  const padded = new Set(pad);
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) {
      const {q, k} = blockOf(win, pool, r, c);
      // every cell masked: by position (every key after every query, or outside the window of
      // each; masks.js), or, key by key, padded or masked by position for every query of the block
      let all = k[1] <= S0 && blockMaskedByPosition(input, q, k);
      if (!all && padded.size && k[1] <= S0) {
        all = true;
        for (let j = k[0]; all && j < k[1]; j++)
          all = padded.has(j) || blockMaskedByPosition(input, q, [j, j + 1]);
      }
      if (all) out[r * cols + c] = 1;
    }
  return out;
}

/** "12:340" for a range (the form of /v2's weights_queries), and back (null if malformed). */
export function rangeText([a, b]) {
  return `${a}:${b}`;
}

export function parseRange(text) {
  const m = /^(\d{1,9}):(\d{1,9})$/.exec(String(text));
  if (!m) return null;
  const a = Number(m[1]), b = Number(m[2]);
  return b > a ? [a, b] : null;
}
