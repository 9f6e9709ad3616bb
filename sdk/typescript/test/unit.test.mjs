// The SDK's parts that need no gateway: the Server-Sent Events parser, the
// retries and the problem bodies, against small local servers.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { AgentosError, Client, bearerProtocol } from "../dist/index.js";
import { parseSSE } from "../dist/stream.js";

function bodyOf(...chunks) {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const s of chunks) c.enqueue(enc.encode(s));
      c.close();
    },
  });
}

async function collect(body, st = { lastEventId: "" }) {
  const out = [];
  for await (const ev of parseSSE(body, st, () => undefined)) out.push(ev);
  return { out, st };
}

test("parseSSE follows the spec: line endings split across chunks, comments, multi-line data, ids", async () => {
  const { out, st } = await collect(bodyOf("\uFEFF: heartbeat\r", "\nid: 1\r\nevent: stdout\r\ndata: a\r", "\ndata: b\r\n\r\n", "id: 2\n\n", "event: exit\ndata: {}\n\n"));
  assert.deepEqual(out, [
    { id: "1", type: "stdout", data: "a\nb" },
    { id: "2", type: "exit", data: "{}" },
  ]);
  assert.equal(st.lastEventId, "2");
});

test("parseSSE drops an event the stream cut before its blank line", async () => {
  const { out } = await collect(bodyOf("data: whole\n\n", "data: cut"));
  assert.deepEqual(out, [{ id: "", type: "message", data: "whole" }]);
});

async function server(handler) {
  const s = http.createServer(handler);
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  return { base: `http://127.0.0.1:${s.address().port}`, close: () => new Promise((r) => { s.closeAllConnections(); s.close(r); }) };
}

test("a keyed POST is retried after 503 with the same Idempotency-Key; an unkeyed one is not", async () => {
  const seen = [];
  const s = await server((req, res) => {
    seen.push({ method: req.method, key: req.headers["idempotency-key"], auth: req.headers.authorization });
    if (seen.length % 2 === 1) {
      res.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "0" });
      res.end(JSON.stringify({ type: "about:blank", title: "Service Unavailable", status: 503, code: "unavailable", detail: "busy" }));
      return;
    }
    res.writeHead(200, { "Content-Type": "application/json", "Idempotent-Replayed": "true" });
    res.end(JSON.stringify({ exitCode: 0, stdout: "aGk=", stderr: "", encoding: "base64", truncated: false, durationMs: 1 }));
  });
  try {
    const c = new Client({ baseUrl: s.base, apiKey: "k", retry: { minBackoffMs: 1 } });
    const r = await c.vm("vm_1").exec({ command: "echo hi" }, { idempotencyKey: "key-1" });
    assert.equal(r.stdoutText, "hi");
    assert.equal(r.replayed, true);
    assert.deepEqual(seen.map((x) => x.key), ["key-1", "key-1"]);
    assert.equal(seen[0].auth, "Bearer k");

    seen.length = 0;
    await assert.rejects(c.vm("vm_1").exec({ command: "echo hi" }), (e) => e instanceof AgentosError && e.status === 503 && e.code === "unavailable" && e.detail === "busy");
    assert.equal(seen.length, 1);
  } finally {
    await s.close();
  }
});

test("an answer that is not a problem still becomes an AgentosError with the status's code", async () => {
  const s = await server((req, res) => {
    res.writeHead(502, { "Content-Type": "text/plain" });
    res.end("bad gateway from a proxy");
  });
  try {
    const c = new Client({ baseUrl: s.base, retry: { maxAttempts: 1 } });
    await assert.rejects(c.vm("x").get(), (e) => e instanceof AgentosError && e.status === 502 && e.code === "unavailable" && e.detail === "bad gateway from a proxy");
  } finally {
    await s.close();
  }
});

test("request rejects, never throws, for a path parameter left out, and sends nothing", async () => {
  let seen = 0;
  const s = await server((req, res) => {
    seen++;
    res.writeHead(204);
    res.end();
  });
  try {
    const c = new Client({ baseUrl: s.base, apiKey: "k", retry: { maxAttempts: 1 } });
    let p;
    assert.doesNotThrow(() => { p = c.request("GET", "/v1/vms/{vm}", {}); });
    await assert.rejects(p, (e) => e instanceof TypeError && /needs the path parameter vm/.test(e.message));
    assert.equal(seen, 0);
    assert.equal(await c.requestJSON("DELETE", "/v1/vms/{vm}", { params: { vm: "vm 1" } }), null);
    assert.equal(seen, 1);
  } finally {
    await s.close();
  }
});

test("bearerProtocol carries tokens as they are and other keys as base64url", () => {
  assert.equal(bearerProtocol("agt_abc-123"), "bearer.agentos-gateway.agt_abc-123");
  assert.equal(bearerProtocol("a b/c"), "bearer.agentos-gateway.YSBiL2M");
});

test("a base URL with a query or another scheme is refused", () => {
  assert.throws(() => new Client({ baseUrl: "ftp://x" }), TypeError);
  assert.throws(() => new Client({ baseUrl: "http://x/?a=1" }), TypeError);
  assert.equal(new Client({ baseUrl: "http://x/prefix/" }).baseUrl, "http://x/prefix");
});

// A WebSocket that behaves as the browser's does where attach depends on it:
// send throws InvalidStateError while connecting, a closed one drops frames,
// and the test opens or refuses it by hand.
class FakeWebSocket extends EventTarget {
  static last;
  readyState = 0;
  sent = [];
  constructor(url, protocols) {
    super();
    this.url = url;
    this.protocols = protocols;
    FakeWebSocket.last = this;
  }
  send(frame) {
    if (this.readyState === 0) throw new DOMException("Sent before connected", "InvalidStateError");
    if (this.readyState === 1) this.sent.push(typeof frame === "string" ? frame : new TextDecoder().decode(frame));
  }
  close(code = 1000, reason = "") {
    if (this.readyState >= 2) return;
    this.readyState = 3;
    this.dispatchEvent(Object.assign(new Event("close"), { code, reason }));
  }
  open() {
    this.readyState = 1;
    this.dispatchEvent(new Event("open"));
  }
  receive(data) {
    this.dispatchEvent(Object.assign(new Event("message"), { data }));
  }
}

test("attach: input sent before the socket opens waits for it and goes first, in order", async () => {
  const c = new Client({ baseUrl: "http://gw.invalid", apiKey: "k", WebSocket: FakeWebSocket });
  const conn = c.vm("vm_1").shell("sh_1").attach();
  const ws = FakeWebSocket.last;
  assert.equal(ws.url, "ws://gw.invalid/v1/vms/vm_1/shells/sh_1/attach");
  const buf = new TextEncoder().encode("echo hi\r");
  conn.send(buf);
  buf.fill(0); // the queued frame is the caller's bytes as they were at send
  conn.resize(100, 30);
  assert.deepEqual(ws.sent, []);
  ws.open();
  await conn.opened();
  conn.send("exit\r");
  assert.deepEqual(ws.sent, ["echo hi\r", '{"type":"resize","cols":100,"rows":30}', "exit\r"]);

  // The loop ends with the exit frame, which the gateway sends when the shell ends.
  ws.receive(new TextEncoder().encode("hi\r\n").buffer);
  ws.receive(JSON.stringify({ type: "exit", seq: 1, exitCode: 0 }));
  const events = [];
  for await (const ev of conn) events.push(ev.type);
  assert.deepEqual(events, ["output", "exit"]);
  assert.equal(ws.readyState, 3);
});

test("attach: input queued for a connection refused before it opened is dropped, and the loop says why", async () => {
  const c = new Client({ baseUrl: "http://gw.invalid", apiKey: "k", WebSocket: FakeWebSocket });
  const conn = c.vm("vm_1").process(7).attach();
  const ws = FakeWebSocket.last;
  conn.send("input");
  conn.closeStdin();
  ws.close(1008, "unauthenticated");
  conn.send("late");
  assert.deepEqual(ws.sent, []);
  await assert.rejects(conn.opened(), (e) => e.name === "AttachClosedError" && e.closeCode === 1008);
  await assert.rejects(async () => {
    for await (const ev of conn) void ev;
  }, (e) => e.name === "AttachClosedError" && e.reason === "unauthenticated");
});
