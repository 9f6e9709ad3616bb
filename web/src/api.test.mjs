// Unit tests of api.js with node:test: the event-stream reader that follows
// the gateway's Server-Sent Events over fetch (framing, ids, resumption,
// final events), the error wording, and the key's encodings. fetch and
// sessionStorage are replaced by stand-ins, so no browser and no gateway
// are needed: run them with `node --test web/src/` (make test does).
import { test, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";
import { ApiError, describe, getKey, setKey, outputText, protocols, q, vmPath, stream } from "./api.js";

// The console keeps its key in sessionStorage, which Node does not have.
class MemoryStorage {
  #m = new Map();
  getItem(k) { return this.#m.has(k) ? this.#m.get(k) : null; }
  setItem(k, v) { this.#m.set(k, String(v)); }
  removeItem(k) { this.#m.delete(k); }
}

let realFetch;
beforeEach(() => {
  globalThis.sessionStorage = new MemoryStorage();
  realFetch = globalThis.fetch;
});
afterEach(() => {
  globalThis.fetch = realFetch;
  delete globalThis.sessionStorage;
});

// body is a response body that delivers each chunk in a read of its own,
// as a network would split the stream; strings are sent as UTF-8.
function body(chunks) {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(typeof ch === "string" ? enc.encode(ch) : ch);
      c.close();
    },
  });
}

function eventStream(chunks) {
  return new Response(body(chunks), { status: 200, headers: { "Content-Type": "text/event-stream" } });
}

// follow serves each response in turn to the stream's requests and resolves
// when the stream ends, with what the stream reported and the requests it
// made.
function follow(responses, opts = {}) {
  const requests = [];
  globalThis.fetch = async (path, init) => {
    requests.push({ path, ...init });
    const next = responses.shift();
    if (!next) throw new Error("no more responses");
    return typeof next === "function" ? next() : next;
  };
  return new Promise((resolve) => {
    const events = [], states = [];
    const s = stream("/v1/vms/vm_1/events", {
      ...opts,
      onEvent: (name, data, id) => events.push({ name, data, id }),
      onState: (state, err) => {
        states.push(err ? [state, err] : state);
        if (state === "ended") resolve({ events, states, requests, stop: s.stop });
      },
    });
  });
}

const sample = "id: 1\nevent: output\ndata: {\"data\":\"héllo\"}\n\n" +
  ": a comment, as the gateway's heartbeats are\n\n" +
  "id: 2\nevent: exit\ndata: {\"exitCode\":0}\n\n";
const sampleEvents = [
  { name: "output", data: { data: "héllo" }, id: "1" },
  { name: "exit", data: { exitCode: 0 }, id: "2" },
];

test("events are the same wherever the stream is split between reads", async () => {
  const bytes = new TextEncoder().encode(sample);
  // Every split point, including inside the two bytes of "é" and between
  // the two newlines that end an event.
  for (let i = 1; i < bytes.length; i++) {
    const { events, states } = await follow([eventStream([bytes.slice(0, i), bytes.slice(i)])]);
    assert.deepEqual(events, sampleEvents, `split at byte ${i}`);
    assert.deepEqual(states, ["open", "ended"], `split at byte ${i}`);
  }
});

test("a stream read one byte at a time gives the same events", async () => {
  const bytes = new TextEncoder().encode(sample);
  const chunks = Array.from(bytes, (b) => Uint8Array.of(b));
  const { events } = await follow([eventStream(chunks)]);
  assert.deepEqual(events, sampleEvents);
});

test("fields follow the event-stream format", async () => {
  const { events } = await follow([eventStream([
    // Lines may end with CRLF or CR as well as LF.
    "event: a\r\ndata: crlf\r\n\r\n",
    "event: b\rdata: cr\r\r",
    // Several data lines are one datum, joined by newlines; data that is not
    // JSON is passed as text.
    "event: c\ndata: one\ndata: two\n\n",
    // Only one space after the colon is dropped, and a field name without a
    // colon has an empty value.
    "event: d\ndata:  indented\n\n",
    "event: e\ndata\n\n",
    // Comments, retry and unknown fields are ignored; an event without data
    // is not dispatched.
    ": comment\nretry: 10000\nfoo: bar\nevent: ignored\n\n",
    // No event field: the event is a message.
    "data: 42\n\n",
    "event: end\ndata: {}\n\n",
  ])]);
  assert.deepEqual(events, [
    { name: "a", data: "crlf", id: "" },
    { name: "b", data: "cr", id: "" },
    { name: "c", data: "one\ntwo", id: "" },
    { name: "d", data: " indented", id: "" },
    { name: "e", data: "", id: "" },
    { name: "message", data: 42, id: "" },
    { name: "end", data: {}, id: "" },
  ]);
});

// The event-stream format lets a CRLF line end arrive in two reads: the LF
// that starts the second read ends no line of its own.
test("a CRLF split between two reads ends one line, not the event", async () => {
  const { events } = await follow([eventStream(["data: a\r", "\ndata: b\r\n\r\n", "event: end\ndata: {}\n\n"])]);
  assert.deepEqual(events.map((e) => e.data), ["a\nb", {}]);
});

test("an event's id is its own: the next event without one has none", async () => {
  const { events } = await follow([eventStream([
    "id: 7\ndata: \"a\"\n\n",
    "data: \"b\"\n\n",
    "event: error\ndata: {}\n\n",
  ])]);
  assert.deepEqual(events.map((e) => e.id), ["7", "", ""]);
});

test("a dropped stream is resumed with Last-Event-ID, then ends at its final event", async () => {
  setKey("k_secret");
  const { events, states, requests } = await follow([
    // The connection drops after event 5 and before any final event.
    eventStream(["id: 4\ndata: \"x\"\n\n", "id: 5\ndata: \"y\"\n\n", "id: 6\ndata: \"cut"]),
    // A network error is retried too.
    () => { throw new TypeError("fetch failed"); },
    eventStream(["id: 6\ndata: \"z\"\n\n", "id: 7\nevent: end\ndata: {}\n\n"]),
  ], { lastEventId: "3" });
  assert.deepEqual(events.map((e) => e.id), ["4", "5", "6", "7"]);
  assert.deepEqual(states, ["open", "retrying", "retrying", "open", "ended"]);
  assert.deepEqual(requests.map((r) => r.headers["Last-Event-ID"]), ["3", "5", "5"]);
  for (const r of requests) {
    assert.equal(r.method, "GET");
    assert.equal(r.headers.Accept, "text/event-stream");
    assert.equal(r.headers.Authorization, "Bearer k_secret");
  }
});

// settle lets every promise the stream chains (fetch, reads, its loop) run,
// while mocked timers stand still.
async function settle() {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

test("reconnects back off from 0.5 s, doubling up to 5 s, and start over once a stream opens", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  let calls = 0;
  const states = [];
  // Six refused connections (network errors), then a stream that drops
  // without a final event, then one that ends.
  globalThis.fetch = async () => {
    calls++;
    if (calls <= 6) throw new TypeError("fetch failed");
    if (calls === 7) return eventStream(["id: 1\ndata: 1\n\n"]);
    return eventStream(["id: 2\nevent: end\ndata: {}\n\n"]);
  };
  stream("/v1/vms/vm_1/events", { onEvent() {}, onState: (s) => states.push(s) });
  await settle();
  for (const [call, delay] of [[1, 500], [2, 1000], [3, 2000], [4, 4000], [5, 5000], [6, 5000], [7, 500]]) {
    assert.equal(calls, call);
    t.mock.timers.tick(delay - 1);
    await settle();
    assert.equal(calls, call, `no reconnect before ${delay} ms`);
    t.mock.timers.tick(1);
    await settle();
  }
  assert.equal(calls, 8);
  assert.deepEqual(states, ["retrying", "retrying", "retrying", "retrying", "retrying", "retrying", "open", "retrying", "open", "ended"]);
});

test("stop ends a stream for good, even while it waits to reconnect", async (t) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  let calls = 0;
  const states = [];
  globalThis.fetch = async () => { calls++; throw new TypeError("fetch failed"); };
  const s = stream("/v1/vms/vm_1/events", { onEvent() {}, onState: (st) => states.push(st) });
  await settle();
  s.stop();
  t.mock.timers.tick(10000);
  await settle();
  assert.equal(calls, 1);
  assert.deepEqual(states, ["retrying"]);
});

test("a streamed POST is never retried: a command must not run twice", async () => {
  const { events, states, requests } = await follow([
    eventStream(["id: 1\nevent: stdout\ndata: \"partial\"\n\n"]),
  ], { method: "POST", json: { command: "ls" } });
  assert.deepEqual(events.map((e) => e.name), ["stdout"]);
  assert.deepEqual(states, ["open", "ended"]);
  assert.equal(requests.length, 1);
  assert.equal(requests[0].body, "{\"command\":\"ls\"}");
  assert.equal(requests[0].headers["Content-Type"], "application/json");
});

test("a refused stream ends with the gateway's problem, without retrying", async () => {
  const problem = { title: "Not Found", detail: "VM vm_1 does not exist", code: "not_found" };
  const { states, requests } = await follow([
    new Response(JSON.stringify(problem), { status: 404, headers: { "Content-Type": "application/problem+json" } }),
  ]);
  assert.equal(requests.length, 1);
  assert.equal(states.length, 1);
  const [state, err] = states[0];
  assert.equal(state, "ended");
  assert.ok(err instanceof ApiError);
  assert.equal(err.status, 404);
  assert.equal(err.code, "not_found");
  assert.equal(describe(err), "Not Found: VM vm_1 does not exist (not_found)");
});

test("a refusal that is not problem+json is still described", async () => {
  const { states } = await follow([new Response("upstream timed out\n", { status: 502, statusText: "Bad Gateway" })]);
  const [, err] = states[0];
  assert.equal(err.status, 502);
  assert.equal(describe(err), "Bad Gateway: upstream timed out");
});

test("describe words every kind of error", () => {
  assert.equal(describe(new ApiError(409, { detail: "busy" })), "busy");
  assert.equal(describe(new ApiError(500, { title: "Internal Server Error" })), "Internal Server Error: Internal Server Error");
  assert.equal(describe(new ApiError(503, {})), "HTTP 503");
  const abort = new Error("aborted");
  abort.name = "AbortError";
  assert.equal(describe(abort), "Cancelled.");
  assert.equal(describe(new Error("boom")), "boom");
  assert.equal(describe("plain"), "plain");
  assert.equal(describe(undefined), "undefined");
});

test("the key is kept in the tab's storage until it is cleared", () => {
  assert.equal(getKey(), "");
  setKey("k_1");
  assert.equal(getKey(), "k_1");
  setKey("");
  assert.equal(getKey(), "");
  assert.equal(sessionStorage.getItem("agentos-gateway.key"), null);
});

test("the WebSocket protocols carry the key as a token, else in base64url", () => {
  setKey("agk_Abc.123-x~");
  assert.deepEqual(protocols(), ["agentos-gateway.v1", "bearer.agentos-gateway.agk_Abc.123-x~"]);
  // A key a subprotocol cannot carry as it is: UTF-8, then base64url
  // without padding ("a/é" is 61 2f c3 a9: YS/DqQ== in base64).
  setKey("a/é");
  assert.deepEqual(protocols(), ["agentos-gateway.v1", "bearer.agentos-gateway.YS_DqQ"]);
});

test("outputText decodes base64 output as UTF-8 and passes text through", () => {
  const b64 = Buffer.from("naïve ✓\n", "utf8").toString("base64");
  assert.equal(outputText({ encoding: "base64", data: b64 }), "naïve ✓\n");
  assert.equal(outputText({ data: "plain" }), "plain");
});

test("paths and queries are escaped", () => {
  assert.equal(vmPath("vm 1/x", "/files"), "/v1/vms/vm%201%2Fx/files");
  assert.equal(vmPath("vm_1"), "/v1/vms/vm_1");
  assert.equal(q({ path: "/a b", recursive: true }), "?path=%2Fa+b&recursive=true");
});
