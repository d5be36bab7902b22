// heatmap.js - matrices drawn on canvases: one canvas pixel per cell, scaled by CSS without
// smoothing, so 16 maps of 512 x 512 are 4M writes into ImageData (no element per cell) and a
// test can read cell (r, c) back at pixel (c, r). Empty cells (masked, or -inf) stay transparent
// over a hatched background.

import {lut, rgb, colourIndex, LOG_DECADES} from "./colormap.js";
import {h, showTip, hideTip} from "./dom.js";
import {short} from "./format.js";

/**
 * Paints rows x cols values of src (row-major from offset) into canvas with map cmap over
 * [lo, hi] (log: logarithmic, LOG_DECADES below hi; colourIndex). empty: optional Uint8Array
 * [rows * cols], 1 = draw nothing.
 */
export function paint(canvas, src, {offset = 0, rows, cols, lo, hi, cmap, empty = null, log = false}) {
  canvas.width = cols;
  canvas.height = rows;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(cols, rows);
  const px = new Uint32Array(img.data.buffer);
  const table = lut(cmap);
  const n = rows * cols;
  for (let i = 0; i < n; i++) {
    const v = src[offset + i];
    if ((empty && empty[i]) || !(v > -Infinity && v < Infinity)) continue; // left transparent
    px[i] = table[colourIndex(v, lo, hi, log)];
  }
  ctx.putImageData(img, 0, 0);
}

/** Range of finite values in src[offset, offset + n) (empty cells skipped). */
export function range(src, offset, n, empty = null) {
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < n; i++) {
    if (empty && empty[i]) continue;
    const v = src[offset + i];
    if (v > -Infinity && v < Infinity) {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return lo <= hi ? [lo, hi] : [0, 0];
}

/** Cell size in CSS pixels so that the larger side fits in maxPx (1 at least, at most maxCell). */
export function cellSize(rows, cols, maxPx, maxCell = 28) {
  return Math.max(1, Math.min(maxCell, Math.floor(maxPx / Math.max(rows, cols, 1))));
}

/**
 * An interactive map: a canvas in a box, with a hover tooltip (describe(r, c) -> text), a keyboard
 * cursor (arrows move it, Enter activates), and activate(r, c) on click or Enter.
 * Returns {el, canvas, setCursor, box(r0, c0, r1, c1, colour)}.
 */
export function mapView({rows, cols, maxPx = 220, maxCell = 28, describe, activate, onCursor, label, canvasProps = {}}) {
  const cell = cellSize(rows, cols, maxPx, maxCell);
  let w = cols * cell, hgt = rows * cell;
  if (Math.max(w, hgt) > maxPx) { // more cells than pixels: shrink, smoothing on
    const f = maxPx / Math.max(w, hgt);
    w = Math.max(1, Math.round(w * f));
    hgt = Math.max(1, Math.round(hgt * f));
  }
  const canvas = h("canvas", {tabindex: "0", role: "img", "aria-label": label || "map", ...canvasProps});
  canvas.style.width = `${w}px`;
  canvas.style.height = `${hgt}px`;
  if (w < cols || hgt < rows) canvas.style.imageRendering = "auto";
  const cursor = h("div", {class: "cursor", hidden: true});
  const el = h("div", {class: "map"}, canvas, cursor);
  let cur = null;

  const cellAt = (ev) => {
    const r = Math.floor((ev.offsetY / canvas.clientHeight) * rows);
    const c = Math.floor((ev.offsetX / canvas.clientWidth) * cols);
    return r >= 0 && r < rows && c >= 0 && c < cols ? [r, c] : null;
  };
  const place = (div, r0, c0, r1, c1) => {
    const sx = w / cols, sy = hgt / rows;
    div.style.left = `${c0 * sx}px`;
    div.style.top = `${r0 * sy}px`;
    div.style.width = `${Math.max(3, (c1 - c0) * sx)}px`;
    div.style.height = `${Math.max(3, (r1 - r0) * sy)}px`;
  };
  const setCursor = (r, c, show = true) => {
    cur = [r, c];
    cursor.hidden = !show;
    place(cursor, r, c, r + 1, c + 1);
    if (onCursor && describe) onCursor(r, c, describe(r, c));
  };

  canvas.addEventListener("mousemove", (ev) => {
    const rc = cellAt(ev);
    if (!rc || !describe) return hideTip();
    showTip(ev, describe(rc[0], rc[1]));
  });
  canvas.addEventListener("mouseleave", hideTip);
  canvas.addEventListener("click", (ev) => {
    const rc = cellAt(ev);
    if (rc && activate) activate(rc[0], rc[1]);
  });
  canvas.addEventListener("focus", () => {
    if (!cur) setCursor(0, 0);
    else setCursor(cur[0], cur[1]);
  });
  canvas.addEventListener("blur", () => (cursor.hidden = true));
  canvas.addEventListener("keydown", (ev) => {
    const [r, c] = cur || [0, 0];
    const step = ev.shiftKey ? 10 : 1;
    const moves = {ArrowUp: [-step, 0], ArrowDown: [step, 0], ArrowLeft: [0, -step], ArrowRight: [0, step]};
    if (moves[ev.key] && !ev.altKey) { // Alt+arrows are left to the map's owner (moving a zoomed window)
      ev.preventDefault();
      const [dr, dc] = moves[ev.key];
      setCursor(Math.min(rows - 1, Math.max(0, r + dr)), Math.min(cols - 1, Math.max(0, c + dc)));
    } else if ((ev.key === "Enter" || ev.key === " ") && activate) {
      ev.preventDefault();
      activate(r, c);
    }
  });

  const box = (r0, c0, r1, c1, colour, title) => {
    const div = h("div", {class: "box", title});
    div.style.borderColor = colour;
    place(div, r0, c0, r1, c1);
    el.append(div);
    return div;
  };
  return {el, canvas, setCursor, box, cssSize: [w, hgt]};
}

/** A legend: the colour bar of cmap from lo to hi, and what an empty cell means. */
export function legend(cmap, lo, hi, {label = "", emptyText = "masked", log = false} = {}) {
  if (log) lo = hi * 10 ** -LOG_DECADES;
  const bar = h("canvas", {width: 256, height: 1, "aria-hidden": "true"});
  const ctx = bar.getContext("2d");
  const img = ctx.createImageData(256, 1);
  for (let i = 0; i < 256; i++) {
    const [r, g, b] = rgb(cmap, i / 255);
    img.data.set([r, g, b, 255], i * 4);
  }
  ctx.putImageData(img, 0, 0);
  bar.style.imageRendering = "pixelated";
  return h("div", {class: "legend", role: "img", "aria-label": `colour scale ${cmap} from ${short(lo)} to ${short(hi)}${log ? ", logarithmic" : ""}`},
    label ? h("span", {}, label) : null,
    h("span", {class: "mono"}, `${log ? "≤ " : ""}${short(lo)}`), bar, h("span", {class: "mono"}, short(hi)), log ? h("span", {class: "muted"}, "(log)") : null,
    emptyText ? [h("span", {class: "empty"}), h("span", {class: "muted"}, emptyText)] : null);
}

/** A copy of a canvas scaled up (nearest neighbour) so that export shows crisp cells. */
export function scaled(canvas, targetPx = 400) {
  const f = Math.max(1, Math.floor(targetPx / Math.max(canvas.width, canvas.height)));
  const out = document.createElement("canvas");
  out.width = canvas.width * f;
  out.height = canvas.height * f;
  const ctx = out.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(canvas, 0, 0, out.width, out.height);
  return out;
}
