// view_lines.js - the line view (bertviz's head view): queries on the left, keys on the right, a
// line from query i to key j for each head drawn, its opacity the weight, one colour per head.
// Heads are toggled with their buttons; hovering (or focusing) a token shows only its lines.
// Each head's lines leave and reach a token at a small offset of their own, so the heads stay
// apart where they agree.

import {h, cssVar} from "./dom.js";
import {f32, short} from "./format.js";
import {hexRgb} from "./colormap.js";
import {scaleTop} from "./view_heads.js";

export const MAX_LINE_TOKENS = 200;

/**
 * given: what to draw instead of the whole result (a long input's window): {weights: {data,
 * shape [H, L, S]}, qLabels, kLabels, first: [first query, first key] of the window}.
 */
export function renderLines(app, root, given = null) {
  const {weights} = given || app.result;
  const [H, L, S] = weights.shape;
  const {qLabels, kLabels} = given || app.input;
  const [q0, k0] = given ? given.first : [0, 0];
  if (L > MAX_LINE_TOKENS || S > MAX_LINE_TOKENS) {
    root.replaceChildren(h("p", {class: "message"},
      `The line view draws up to ${MAX_LINE_TOKENS} tokens a side; this input has ${L} queries and ${S} keys. The heatmaps (Heads) show any length.`));
    return null;
  }
  const colours = app.headColours();
  const top = scaleTop(app, [[weights.data, weights.data.length]]); // opacity 1 at the scale's top
  const shown = new Set(app.state.heads ?? [...Array(H).keys()]);
  let focus = null; // {side: "q" | "k", index}, from hover or keyboard focus
  let pinned = null;

  const rowH = Math.max(14, Math.min(24, Math.floor(600 / Math.max(L, S))));
  const height = Math.max(L, S) * rowH;
  const qTop = ((Math.max(L, S) - L) * rowH) / 2, kTop = ((Math.max(L, S) - S) * rowH) / 2;
  const canvas = h("canvas", {"aria-label": "attention lines from queries to keys", role: "img", dataset: {lines: "1"}});
  const cssW = 360, dpr = window.devicePixelRatio || 1;
  canvas.width = Math.round(cssW * dpr);
  canvas.height = Math.round(height * dpr);
  canvas.style.height = `${height}px`;
  const readout = h("div", {class: "readout", "aria-live": "polite"});

  const yOf = (top, idx, head) => top + idx * rowH + rowH / 2 + (H > 1 ? ((head - (H - 1) / 2) / H) * rowH * 0.6 : 0);

  function draw(ctx, width, scale, xq = 0, xk = width) {
    ctx.lineWidth = 2.5 * scale;
    for (let head = 0; head < H; head++) {
      if (!shown.has(head)) continue;
      ctx.strokeStyle = colours[head];
      const base = head * L * S;
      for (let i = 0; i < L; i++) {
        if (focus && focus.side === "q" && focus.index !== i) continue;
        for (let j = 0; j < S; j++) {
          if (focus && focus.side === "k" && focus.index !== j) continue;
          const w = weights.data[base + i * S + j];
          if (!(w > 0.002 * top)) continue;
          ctx.globalAlpha = Math.min(1, w / top);
          ctx.beginPath();
          ctx.moveTo(xq, yOf(qTop, i, head) * scale);
          ctx.lineTo(xk, yOf(kTop, j, head) * scale);
          ctx.stroke();
        }
      }
    }
    ctx.globalAlpha = 1;
  }

  function redraw() {
    const ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    draw(ctx, canvas.width, dpr);
    for (const [side, list] of [["q", qCol], ["k", kCol]])
      list.forEach((b, idx) => b.classList.toggle("active", !!focus && focus.side === side && focus.index === idx));
    if (!focus) {
      readout.textContent = "";
      return;
    }
    const {side, index} = focus;
    const lines = [];
    for (let head = 0; head < H; head++) {
      if (!shown.has(head)) continue;
      const vals = [];
      if (side === "q") for (let j = 0; j < S; j++) vals.push(weights.data[head * L * S + index * S + j]);
      else for (let i = 0; i < L; i++) vals.push(weights.data[head * L * S + i * S + index]);
      const best = vals.indexOf(Math.max(...vals));
      lines.push(`head ${head}: ${side === "q" ? `strongest key ${k0 + best} "${kLabels[best]}"` : `strongest query ${q0 + best} "${qLabels[best]}"`} ${f32(vals[best])}`);
    }
    readout.textContent = `${side === "q" ? `query ${q0 + index} "${qLabels[index]}"` : `key ${k0 + index} "${kLabels[index]}"`} — ${lines.join(" · ")}`;
  }

  const token = (side, idx, text, top) => {
    const b = h("button", {type: "button", class: "tok", style: {height: `${rowH}px`}, title: `${side === "q" ? `query ${q0 + idx}` : `key ${k0 + idx}`}`}, text);
    const enter = () => {
      if (!pinned) {
        focus = {side, index: idx};
        redraw();
      }
    };
    const leave = () => {
      if (!pinned) {
        focus = null;
        redraw();
      }
    };
    b.addEventListener("mouseenter", enter);
    b.addEventListener("focus", enter);
    b.addEventListener("mouseleave", leave);
    b.addEventListener("blur", leave);
    b.addEventListener("click", () => { // pin: the lines stay when the pointer moves on
      pinned = pinned && pinned.side === side && pinned.index === idx ? null : {side, index: idx};
      focus = pinned || {side, index: idx};
      redraw();
    });
    b.style.marginTop = idx === 0 ? `${top}px` : "0";
    return b;
  };
  const qCol = qLabels.slice(0, L).map((t, i) => token("q", i, t, qTop));
  const kCol = kLabels.slice(0, S).map((t, j) => token("k", j, t, kTop));

  const toggles = colours.map((c, head) => {
    const b = h("button", {type: "button", "aria-pressed": String(shown.has(head)), dataset: {lineHead: String(head), color: c},
                           style: {borderColor: c}, title: "show or hide; double-click: this head only"},
      h("span", {class: "swatch", style: {background: c}}), `head ${head}`);
    b.addEventListener("click", () => {
      if (shown.has(head)) shown.delete(head);
      else shown.add(head);
      commit();
    });
    b.addEventListener("dblclick", () => {
      shown.clear();
      shown.add(head);
      commit();
    });
    return b;
  });
  const all = h("button", {type: "button", onclick: () => {
    for (let head = 0; head < H; head++) shown.add(head);
    commit();
  }}, "all");
  function commit() {
    toggles.forEach((b, head) => b.setAttribute("aria-pressed", String(shown.has(head))));
    const list = [...shown].sort((a, b) => a - b);
    app.setState({heads: list.length === H ? null : list});
  }

  root.replaceChildren(
    h("p", {class: "hint"}, `Each line joins a query (left) to a key (right); its opacity is the head's weight (opaque at ${short(top)}, the scale top). ` +
      "Hover or focus a token to see only its lines, click it to pin them." +
      (given ? ` Queries ${q0}–${q0 + L - 1} and keys ${k0}–${k0 + S - 1}: the window of the Heads map.` : "")),
    h("div", {class: "head-toggles", role: "group", "aria-label": "heads shown"}, toggles, all),
    h("div", {class: "lines"}, h("div", {class: "col left"}, qCol), canvas, h("div", {class: "col right"}, kCol)),
    readout);
  redraw();

  return {
    exportCanvas: () => {
      const scale = 2, labelW = 140, width = cssW + 2 * labelW;
      const out = document.createElement("canvas");
      out.width = width * scale;
      out.height = (height + 20) * scale;
      const ctx = out.getContext("2d");
      ctx.fillStyle = cssVar("--bg") || "#fff";
      ctx.fillRect(0, 0, out.width, out.height);
      ctx.save();
      ctx.translate(labelW * scale, 10 * scale);
      draw(ctx, cssW * scale, scale);
      ctx.restore();
      ctx.fillStyle = cssVar("--fg") || "#000";
      ctx.font = `${12 * scale}px system-ui, sans-serif`;
      ctx.textBaseline = "middle";
      ctx.textAlign = "right";
      qLabels.slice(0, L).forEach((t, i) => ctx.fillText(t, (labelW - 6) * scale, (10 + qTop + i * rowH + rowH / 2) * scale));
      ctx.textAlign = "left";
      kLabels.slice(0, S).forEach((t, j) => ctx.fillText(t, (labelW + cssW + 6) * scale, (10 + kTop + j * rowH + rowH / 2) * scale));
      return out;
    },
    exportData: () => ({heads_shown: [...shown].sort((a, b) => a - b), first_query: q0, first_key: k0,
                        head_colours: colours.map((c) => hexRgb(c)),
                        attn_weights: {shape: [H, L, S], axes: ["H", "L", "S"], data: Array.from(weights.data)}}),
  };
}
