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

/**
 * Where the keyboard focus is inside root, as something that outlives a rebuild of root: the
 * element's tag, class and data attributes, and its place among root's elements like it (null when
 * the focus is elsewhere). refocus(root, key) focuses the rebuilt element that matches, so that a
 * view redrawn after Enter on a map, a cell or a chip leaves the user where they were.
 */
export function focusKey(root) {
  const el = document.activeElement;
  if (!el || el === document.body || !root.contains(el)) return null;
  const sel = el.tagName.toLowerCase() + [...el.classList].map((c) => `.${CSS.escape(c)}`).join("") +
              Object.entries(el.dataset).map(([k, v]) => `[data-${k.replace(/[A-Z]/g, (m) => `-${m.toLowerCase()}`)}="${CSS.escape(v)}"]`).join("");
  return {sel, index: [...root.querySelectorAll(sel)].indexOf(el)};
}

export function refocus(root, key) {
  if (!key || (document.activeElement && document.activeElement !== document.body && root.contains(document.activeElement))) return;
  const all = root.querySelectorAll(key.sel);
  const el = all[Math.min(Math.max(key.index, 0), all.length - 1)];
  if (el && typeof el.focus === "function") el.focus({preventScroll: true});
}
