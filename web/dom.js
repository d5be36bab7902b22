// dom.js - a few helpers to build elements without a framework.

/** h("button", {class: "x", onclick: f, dataset: {head: "0"}}, "text", child, ...) */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "style" && typeof v === "object") Object.assign(el.style, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c == null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];

const tip = () => document.getElementById("tip");

/** Shows the floating tooltip near a pointer event (text keeps its line breaks). */
export function showTip(ev, text) {
  const t = tip();
  if (!t) return;
  t.textContent = text;
  t.hidden = false;
  const pad = 14, w = t.offsetWidth, hgt = t.offsetHeight;
  let x = ev.clientX + pad, y = ev.clientY + pad;
  if (x + w > window.innerWidth) x = ev.clientX - w - pad;
  if (y + hgt > window.innerHeight) y = ev.clientY - hgt - pad;
  t.style.left = `${Math.max(0, x)}px`;
  t.style.top = `${Math.max(0, y)}px`;
}

export function hideTip() {
  const t = tip();
  if (t) t.hidden = true;
}

/** A CSS custom property of the page (theme colours for drawing on canvases). */
export function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}
