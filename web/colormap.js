// colormap.js - colour scales computed on the page (nothing fetched).
//
// Sequential maps for attention weights: viridis and cividis (matplotlib's perceptually uniform,
// colour-vision-deficiency-friendly maps), given by evenly spaced sRGB anchors and interpolated
// linearly; their lightness grows monotonically, so the brightest cell is the largest value.
// A diverging map (purple - neutral - orange, ColorBrewer's PuOr, safe for the common colour
// vision deficiencies) for signed tensors such as projections and scores.

const ANCHORS = {
  viridis: ["#440154", "#472c7a", "#3b518b", "#2c718e", "#21908d", "#27ad81", "#5cc863", "#aadc32", "#fde725"],
  cividis: ["#00224e", "#123570", "#3b496c", "#575d6d", "#707173", "#8a8779", "#a69d75", "#c4b56c", "#e4cf5b", "#fee838"],
  diverging: ["#542788", "#998ec3", "#d8daeb", "#f7f7f7", "#fee0b6", "#f1a340", "#b35806"],
};

export const SEQUENTIAL = ["viridis", "cividis"];

function hexRgb(h) {
  return [parseInt(h.slice(1, 3), 16), parseInt(h.slice(3, 5), 16), parseInt(h.slice(5, 7), 16)];
}

/** [r, g, b] (0..255) of map name at t in [0, 1]. */
export function rgb(name, t) {
  const a = ANCHORS[name] || ANCHORS.viridis;
  t = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0));
  const x = t * (a.length - 1), i = Math.min(a.length - 2, Math.floor(x)), f = x - i;
  const c0 = hexRgb(a[i]), c1 = hexRgb(a[i + 1]);
  return c0.map((v, k) => Math.round(v + (c1[k] - v) * f));
}

export function css(name, t) {
  const [r, g, b] = rgb(name, t);
  return `rgb(${r},${g},${b})`;
}

/** Decades a logarithmic scale spans below its top: [top · 10^-LOG_DECADES, top]. */
export const LOG_DECADES = 4;

/**
 * The colour step (0..255) of value v on a scale from lo to hi: linear, or logarithmic from
 * hi · 10^-LOG_DECADES (v at or below that, and v <= 0, are step 0). What paint() draws.
 */
export function colourIndex(v, lo, hi, log = false) {
  let t;
  if (log) {
    const bottom = Math.log(hi) - LOG_DECADES * Math.LN10;
    t = v > 0 && hi > 0 ? (Math.log(v) - bottom) * (255 / (LOG_DECADES * Math.LN10)) : 0;
  } else t = (v - lo) * (hi > lo ? 255 / (hi - lo) : 0);
  t = t < 0 ? 0 : t > 255 ? 255 : t;
  return (t + 0.5) | 0;
}

const lutCache = new Map();

/**
 * 256 colours of a map packed for ImageData's Uint32 view (RGBA bytes in memory order:
 * little-endian hosts read them as ABGR).
 */
export function lut(name) {
  if (lutCache.has(name)) return lutCache.get(name);
  const le = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  const out = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    const [r, g, b] = rgb(name, i / 255);
    out[i] = le ? ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0 : ((r << 24) | (g << 16) | (b << 8) | 255) >>> 0;
  }
  lutCache.set(name, out);
  return out;
}

/** Relative luminance (WCAG) of an sRGB colour, 0..1. */
export function luminance([r, g, b]) {
  const lin = (v) => ((v /= 255) <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
  return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
}

// Okabe & Ito's eight colours, told apart with every common colour vision deficiency; past eight
// heads, hues evenly spaced at two lightnesses.
const OKABE_ITO = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"];

/** A distinct colour for each of H heads (hex). */
export function headColours(H) {
  if (H <= 7) return OKABE_ITO.slice(0, H); // black is kept for the eighth: it vanishes on dark
  const out = [];
  for (let h = 0; h < H; h++) {
    const hue = (h * 360) / H, light = h % 2 ? 38 : 55;
    out.push(hslHex(hue, 75, light));
  }
  return out;
}

function hslHex(h, s, l) {
  s /= 100;
  l /= 100;
  const k = (n) => (n + h / 30) % 12, a = s * Math.min(l, 1 - l);
  const f = (n) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  return "#" + [f(0), f(8), f(4)].map((v) => Math.round(v * 255).toString(16).padStart(2, "0")).join("");
}

export {hexRgb};
