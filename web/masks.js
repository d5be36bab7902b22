// masks.js - which cells of a map the layer and the input mask, as the daemon does: is_causal (a key
// after its query), the layer's sliding window, and padded keys, by position (docs/api.md: key j is
// allowed for query i when p_j <= p_i with is_causal, |p_i - p_j| < W with a window, both with
// both). Queries sit at positions qoff + i; keys at koff + j (the query positions in self-attention,
// else 0..S0-1); keys appended by add_bias_kv / add_zero_attn (j >= S0) are never masked.

/** The allowed values of d = p_i - p_j, as [lo, hi] (infinite ends where nothing bounds them). */
export function allowedDiffs({causal, window}) {
  let lo = -Infinity, hi = Infinity;
  if (causal) lo = 0;
  if (window) {
    hi = window - 1;
    if (!causal) lo = -(window - 1);
  }
  return [lo, hi];
}

/** Whether cell (query i, key j) of the input is masked. */
export function cellMasked(input, i, j) {
  const {S0, pad, qoff = 0, koff = 0} = input;
  if (j >= S0) return false;
  if (pad.includes(j)) return true;
  const [lo, hi] = allowedDiffs(input);
  const d = qoff + i - (koff + j);
  return d < lo || d > hi;
}

/** Whether every cell of the block of queries [q0, q1) and keys [k0, k1) is masked by position
 * (padding aside): the differences over a block are every whole number between its extremes. */
export function blockMaskedByPosition(input, [q0, q1], [k0, k1]) {
  const {S0, qoff = 0, koff = 0} = input;
  if (k1 > S0) return false;
  const [lo, hi] = allowedDiffs(input);
  const dmin = qoff + q0 - (koff + k1 - 1), dmax = qoff + q1 - 1 - (koff + k0);
  return dmax < lo || dmin > hi;
}
