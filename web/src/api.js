// The gateway's API as the console calls it: the key is kept in the tab's
// sessionStorage, every error is an ApiError carrying its problem document,
// and event streams are read with fetch (EventSource cannot send the key).

const keyName = "agentos-gateway.key";

export function getKey() { return sessionStorage.getItem(keyName) || ""; }
export function setKey(k) { if (k) sessionStorage.setItem(keyName, k); else sessionStorage.removeItem(keyName); }

// The scopes of the token the tab signed in with (null for an API key, which
// may do everything its tenant may): the pages show only what they allow.
let scopes = null;
export function setScopes(list) { scopes = list ? new Set(list) : null; }
export function allowed(scope) { return scopes === null || scopes.has(scope); }
export function isKey() { return scopes === null; }

// ApiError is a refused request: message is the problem's detail, in the
// gateway's words.
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.code = problem.code || "";
    this.problem = problem;
  }
}

// describe turns any error into a sentence for the page.
export function describe(err) {
  if (err instanceof ApiError) {
    const title = err.problem.title ? err.problem.title + ": " : "";
    return `${title}${err.message}${err.code ? ` (${err.code})` : ""}`;
  }
  if (err && err.name === "AbortError") return "Cancelled.";
  return (err && err.message) || String(err);
}

async function problemOf(resp) {
  const text = await resp.text().catch(() => "");
  try {
    const p = JSON.parse(text);
    if (p && typeof p === "object") return p;
  } catch { /* not JSON: the status says what happened */ }
  return { title: resp.statusText || `HTTP ${resp.status}`, detail: text.trim() || `the gateway answered ${resp.status}` };
}

// raw sends a request with the key and returns the Response, throwing an
// ApiError for any status of 400 or more.
export async function raw(method, path, { body, json, headers = {}, signal } = {}) {
  const h = { ...headers };
  const key = getKey();
  if (key) h.Authorization = "Bearer " + key;
  if (json !== undefined) {
    h["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  const resp = await fetch(path, { method, headers: h, body, signal });
  if (resp.status >= 400) throw new ApiError(resp.status, await problemOf(resp));
  return resp;
}

// call sends a request and returns its JSON answer (null when it has none).
export async function call(method, path, opts) {
  const resp = await raw(method, path, opts);
  if (resp.status === 204) return null;
  const ct = resp.headers.get("Content-Type") || "";
  return ct.includes("json") ? resp.json() : resp.text();
}

export const q = (params) => "?" + new URLSearchParams(params).toString();
export const vmPath = (vm, rest = "") => `/v1/vms/${encodeURIComponent(vm)}${rest}`;

// upload PUTs a file with XMLHttpRequest, the only browser API that reports
// upload progress, calling onProgress(fraction).
export function upload(path, file, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open("PUT", path);
    x.setRequestHeader("Authorization", "Bearer " + getKey());
    x.setRequestHeader("Content-Type", "application/octet-stream");
    x.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    x.onload = () => {
      if (x.status < 400) { onProgress(1); resolve(JSON.parse(x.responseText || "null")); return; }
      let p;
      try { p = JSON.parse(x.responseText); } catch { p = { detail: x.responseText || `the gateway answered ${x.status}` }; }
      reject(new ApiError(x.status, p));
    };
    x.onerror = () => reject(new Error("the upload failed: the connection was lost"));
    x.send(file);
  });
}

// Final event names: a stream that sends one of these has ended for good.
const finalEvents = new Set(["exit", "end", "error"]);

// stream follows a Server-Sent Events stream with fetch, calling
// onEvent(name, data, id) for each event, and reconnects with
// Last-Event-ID after a dropped connection until a final event arrives or
// stop() is called. onState("open" | "retrying" | "ended", err) reports the
// connection. method and json make it a POST (a streamed exec, never
// retried: a command must not run twice).
export function stream(path, { onEvent, onState = () => {}, lastEventId = "", method = "GET", json } = {}) {
  const ctl = new AbortController();
  let last = lastEventId;
  let stopped = false;
  const run = async () => {
    let delay = 500;
    while (!stopped) {
      try {
        const headers = { Accept: "text/event-stream" };
        if (last) headers["Last-Event-ID"] = last;
        const resp = await raw(method, path, { headers, json, signal: ctl.signal });
        onState("open");
        delay = 500;
        const ended = await readEvents(resp.body, (name, data, id) => {
          if (id) last = id;
          onEvent(name, data, id);
        });
        if (ended || method !== "GET") { onState("ended"); return; }
      } catch (err) {
        if (stopped) return;
        if (err instanceof ApiError || method !== "GET") { onState("ended", err); return; }
      }
      if (stopped) return;
      onState("retrying");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  };
  run();
  return { stop() { stopped = true; ctl.abort(); } };
}

// readEvents parses an event stream and reports whether it ended with a
// final event.
async function readEvents(body, emit) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let name = "", data = [], id = "";
  let final = false;
  // cr says the last line ended with a CR at the end of a read: an LF at
  // the start of the next read is the rest of that CRLF, not an empty line.
  let cr = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return final;
    buf += value;
    if (cr && buf.startsWith("\n")) buf = buf.slice(1);
    cr = false;
    let i;
    while ((i = buf.search(/\r\n|\n|\r/)) >= 0) {
      const line = buf.slice(0, i);
      const end = i + (buf.startsWith("\r\n", i) ? 2 : 1);
      cr = buf[i] === "\r" && end === buf.length;
      buf = buf.slice(end);
      if (line === "") {
        if (data.length) {
          let parsed;
          try { parsed = JSON.parse(data.join("\n")); } catch { parsed = data.join("\n"); }
          const n = name || "message";
          emit(n, parsed, id);
          if (finalEvents.has(n)) final = true;
        }
        name = ""; data = []; id = "";
        continue;
      }
      if (line.startsWith(":")) continue;
      const c = line.indexOf(":");
      const f = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? "" : line.slice(c + 1);
      if (v.startsWith(" ")) v = v.slice(1);
      if (f === "event") name = v;
      else if (f === "data") data.push(v);
      else if (f === "id") id = v;
    }
  }
}

// decodeOutput returns an output event's bytes as text.
export function outputText(ev) {
  if (ev.encoding === "base64") {
    const b = atob(ev.data);
    const u = new Uint8Array(b.length);
    for (let i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);
    return new TextDecoder().decode(u);
  }
  return ev.data;
}

// wsURL is the WebSocket URL of an API path on this origin.
export function wsURL(path) {
  return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
}

// protocols are the WebSocket subprotocols that carry the key: as is when it
// is a token, else base64url without padding (the gateway accepts both).
export function protocols() {
  const k = getKey();
  const token = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(k) ? k
    : btoa(String.fromCharCode(...new TextEncoder().encode(k))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return ["agentos-gateway.v1", "bearer.agentos-gateway." + token];
}
