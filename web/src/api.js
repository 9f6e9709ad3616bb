// The gateway's API as the console calls it, over the TypeScript SDK
// (sdk/typescript): the SDK sends every request, follows every event stream
// with Last-Event-ID and speaks the attach WebSocket; this module keeps the
// console's call shapes (paths, callbacks) and adds the one thing the SDK
// has no use for, an upload that reports its progress. Errors are the
// SDK's AgentosError, which text.js words for the page.
import { AgentosError, codeForStatus, isCode } from "../../sdk/typescript/src/index.ts";
import { getKey } from "./access.js";
import { client } from "./client.js";

export { getKey, setKey, setScopes, allowed, isKey } from "./access.js";
export { describe, q, vmPath } from "./text.js";
export { isCode };
export { client } from "./client.js";

// raw sends a request with the key and returns the Response, throwing an
// AgentosError for any status outside 2xx. The path may carry its query.
// It goes through the SDK's Client.request rather than its other methods,
// because the console also calls what the SDK leaves out (tenants, keys,
// sidecars) and its pages read answers as the gateway wrote them.
export function raw(method, path, { body, json, headers = {}, signal } = {}) {
  return client().request(method, path, { body, json, headers, signal, accept: headers.Accept ?? "*/*" });
}

// call sends a request and returns its JSON answer (null when it has none).
export async function call(method, path, opts) {
  const resp = await raw(method, path, opts);
  if (resp.status === 204) return null;
  const ct = resp.headers.get("Content-Type") || "";
  return ct.includes("json") ? resp.json() : resp.text();
}

// upload PUTs a file with XMLHttpRequest, the only browser API that reports
// upload progress (the SDK sends with fetch, which does not), calling
// onProgress(fraction). A refusal is an AgentosError as the SDK's are.
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
      reject(new AgentosError({ status: x.status, code: p.code || codeForStatus(x.status), title: p.title || x.statusText, detail: p.detail || "" }));
    };
    x.onerror = () => reject(new Error("the upload failed: the connection was lost"));
    x.send(file);
  });
}

// outputText returns the bytes of an output event as text.
export function outputText(ev) { return new TextDecoder().decode(ev.data); }

export { followVM, followSession, followProcess, execStream } from "./streams.js";
