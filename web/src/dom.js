// h builds an element: h("button", {onclick, "aria-label": "x"}, "text", child).
// Attributes starting with "on" become listeners; others are set as
// properties when the element has them (value, checked, disabled), else as
// attributes. Children may be strings, nodes, arrays, or null (skipped).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k in el && typeof v !== "string") el[k] = v;
    else if (k === "value") el.value = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

// replace empties el and appends children.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// field is a labelled input: the label's text is the input's accessible name.
export function field(label, input) {
  const id = "f" + Math.random().toString(36).slice(2, 10);
  input.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

// age says how long ago an ISO time was, in the largest whole unit.
export function age(iso) {
  const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

// bytes formats a size for people.
export function bytes(n) {
  if (n < 1024) return n + " B";
  const u = ["KiB", "MiB", "GiB", "TiB"];
  let i = -1;
  do { n /= 1024; i++; } while (n >= 1024 && i < u.length - 1);
  return n.toFixed(n < 10 ? 1 : 0) + " " + u[i];
}

// parsePairs reads "KEY=value" lines (or comma-separated pairs) into an object.
export function parsePairs(text, what) {
  const out = {};
  for (const raw of text.split(/[\n,]/)) {
    const line = raw.trim();
    if (!line) continue;
    const i = line.indexOf("=");
    if (i <= 0) throw new Error(`${what}: "${line}" is not KEY=value`);
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}
