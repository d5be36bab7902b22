// export.js - the current view as a PNG (its canvases laid out with their titles) or as JSON.

import {cssVar} from "./dom.js";
import {scaled} from "./heatmap.js";

/** Saves a Blob as a file through a temporary link. */
export function download(blob, filename) {
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/**
 * One canvas holding items [{title, canvas}] in rows (each canvas scaled up to about cellPx),
 * on the page's background, with a heading line.
 */
export function compose(items, {heading = "", maxWidth = 1800, cellPx = 240} = {}) {
  const bg = cssVar("--bg") || "#fff", fg = cssVar("--fg") || "#000";
  const pad = 12, titleH = 18, headH = heading ? 26 : 0;
  const tiles = items.map((it) => ({title: it.title, canvas: it.raw ? it.canvas : scaled(it.canvas, cellPx)}));
  let x = pad, y = pad + headH, rowH = 0, width = 0;
  const pos = [];
  for (const t of tiles) {
    const w = t.canvas.width, hgt = t.canvas.height + titleH;
    if (x > pad && x + w > maxWidth) {
      x = pad;
      y += rowH + pad;
      rowH = 0;
    }
    pos.push([x, y]);
    x += w + pad;
    rowH = Math.max(rowH, hgt);
    width = Math.max(width, x);
  }
  const out = document.createElement("canvas");
  out.width = Math.max(width, 200);
  out.height = y + rowH + pad;
  const ctx = out.getContext("2d");
  ctx.fillStyle = bg;
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.fillStyle = fg;
  ctx.font = "bold 15px system-ui, sans-serif";
  if (heading) ctx.fillText(heading, pad, pad + 15);
  ctx.font = "12px system-ui, sans-serif";
  ctx.imageSmoothingEnabled = false;
  tiles.forEach((t, i) => {
    const [px, py] = pos[i];
    ctx.fillText(t.title || "", px, py + 12);
    ctx.drawImage(t.canvas, px, py + titleH);
  });
  return out;
}

/** A typed array as a nested plain array of the given shape (for JSON export). */
export function nested(data, shape, offset = 0) {
  if (shape.length === 0) return data[offset];
  if (shape.length === 1) return Array.from(data.subarray(offset, offset + shape[0]), (v) => (Number.isFinite(v) ? v : v > 0 ? "inf" : v < 0 ? "-inf" : "nan"));
  const inner = shape.slice(1).reduce((a, b) => a * b, 1);
  return Array.from({length: shape[0]}, (_, i) => nested(data, shape.slice(1), offset + i * inner));
}
