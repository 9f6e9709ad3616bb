// The SDK against a real gateway and sidecar: run by make test, after the
// SDK is built into dist/.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { AgentosError, Client, isCode } from "../dist/index.js";
import { signWebhook, verifyWebhook, WebhookVerificationError } from "../dist/webhook.js";
import { adminKey, startGateway } from "./gateway.mjs";

const text = (b) => new TextDecoder().decode(b);

describe("against a gateway", { timeout: 300_000 }, () => {
  let gw;
  let client;
  let vm;

  before(async () => {
    gw = await startGateway();
    client = new Client({ baseUrl: gw.base, apiKey: adminKey });
    const created = await client.createVM({ labels: { sdk: "typescript" } });
    vm = client.vm(created.id);
  });

  after(async () => {
    await vm?.delete().catch(() => undefined);
    await gw?.stop();
  });

  test("exec answers the exit code and output", async () => {
    const r = await vm.exec({ command: "echo hello; echo oops >&2; exit 3" });
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdoutText, "hello\n");
    assert.equal(r.stderrText, "oops\n");
    assert.equal(r.replayed, false);
    const cwd = await vm.exec({ command: "pwd" });
    assert.equal(cwd.stdoutText.trim(), "/workspace");
  });

  test("request reaches a route the SDK has no method for, typed by its template", async () => {
    const got = await client.requestJSON("GET", "/v1/vms/{vm}", { params: { vm: vm.id } });
    assert.equal(got.id, vm.id);
    const tenant = await client.requestJSON("POST", "/v1/tenants", { json: { name: `sdk-request-${Date.now()}` } });
    const key = await client.requestJSON("POST", "/v1/tenants/{tenant}/keys", { params: { tenant: tenant.id } });
    const keys = await client.requestJSON("GET", "/v1/tenants/{tenant}/keys", { params: { tenant: tenant.id } });
    assert.deepEqual(keys.items.map((k) => k.id), [key.id]);
    // A path a caller built, query and all, goes as it is; query options join it.
    await vm.writeFile("/tmp/request.txt", "via request");
    const resp = await client.request("GET", `/v1/vms/${encodeURIComponent(vm.id)}/files?path=%2Ftmp%2Frequest.txt`, { accept: "*/*" });
    assert.equal(await resp.text(), "via request");
    assert.equal(await client.requestJSON("DELETE", "/v1/vms/{vm}/files", { params: { vm: vm.id }, query: { path: "/tmp/request.txt" } }), null);
    await assert.rejects(client.request("GET", "/v1/vms/{vm}", { params: { vm: "vm_none" } }), (err) => err instanceof AgentosError && err.status === 404);
    await assert.rejects(client.request("GET", "/v1/vms/{vm}"), /needs the path parameter vm/);
  });

  test("exec with an idempotency key runs once", async () => {
    const key = `sdk-${Date.now()}`;
    const first = await vm.exec({ command: "echo $RANDOM$RANDOM" }, { idempotencyKey: key });
    const again = await vm.exec({ command: "echo $RANDOM$RANDOM" }, { idempotencyKey: key });
    assert.equal(again.replayed, true);
    assert.equal(again.stdoutText, first.stdoutText);
  });

  test("exec takes bytes on stdin", async () => {
    const r = await vm.exec({ argv: ["wc", "-c"], stdin: new Uint8Array([0, 1, 2, 255]) });
    assert.equal(r.stdoutText.trim(), "4");
  });

  test("execStream yields typed events and ends with exit", async () => {
    const events = [];
    for await (const ev of vm.execStream({ command: "echo out; echo err >&2; exit 7" })) events.push(ev);
    const out = events.filter((e) => e.type === "stdout").map((e) => text(e.data)).join("");
    const err = events.filter((e) => e.type === "stderr").map((e) => text(e.data)).join("");
    assert.equal(out, "out\n");
    assert.equal(err, "err\n");
    const last = events.at(-1);
    assert.equal(last.type, "exit");
    assert.equal(last.exitCode, 7);
    assert.equal(typeof last.durationMs, "number");
  });

  test("spawn, then follow resumed after an abort, loses and repeats nothing", async () => {
    const p = await vm.spawn({ command: "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.2; done" });
    const proc = vm.process(p.pid);
    let got = "";
    let seq = 0;
    const ac = new AbortController();
    await assert.rejects(async () => {
      for await (const ev of proc.follow({ signal: ac.signal })) {
        if (ev.type !== "stdout") continue;
        got += text(ev.data);
        seq = ev.seq;
        if (got.includes("line2")) ac.abort();
      }
    }, (e) => e.name === "AbortError");
    assert.ok(seq > 0);
    const stream = proc.follow({ after: seq });
    let exit;
    for await (const ev of stream) {
      if (ev.type === "stdout") {
        assert.ok(ev.seq > seq, `seq ${ev.seq} after ${seq}`);
        got += text(ev.data);
      }
      if (ev.type === "exit") exit = ev;
    }
    assert.equal(exit?.exitCode, 0);
    assert.equal(got, [1, 2, 3, 4, 5, 6].map((i) => `line${i}\n`).join(""));
  });

  test("follow reconnects with Last-Event-ID after a dropped connection", async () => {
    // A proxy that cuts the first output stream after its first event, as a
    // network failure would.
    const target = new URL(gw.base);
    let cut = 0;
    const lastEventIds = [];
    const proxy = http.createServer((req, res) => {
      const isOutput = req.url.includes("/output");
      if (isOutput) lastEventIds.push(req.headers["last-event-id"] ?? "");
      const up = http.request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        if (isOutput && cut === 0) {
          cut++;
          ur.once("data", (chunk) => {
            res.write(chunk);
            setTimeout(() => { res.destroy(); ur.destroy(); }, 100);
          });
          return;
        }
        ur.pipe(res);
      });
      req.pipe(up);
    });
    await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
    try {
      const pc = new Client({ baseUrl: `http://127.0.0.1:${proxy.address().port}`, apiKey: adminKey, retry: { minBackoffMs: 50 } });
      const p = await pc.vm(vm.id).spawn({ command: "for i in 1 2 3 4; do echo n$i; sleep 0.3; done" });
      let got = "";
      for await (const ev of pc.vm(vm.id).process(p.pid).follow()) if (ev.type === "stdout") got += text(ev.data);
      assert.equal(got, "n1\nn2\nn3\nn4\n");
      assert.ok(lastEventIds.length >= 2, `reconnected: ${JSON.stringify(lastEventIds)}`);
      assert.equal(lastEventIds[0], "");
      assert.notEqual(lastEventIds[1], "");
    } finally {
      proxy.closeAllConnections();
      proxy.close();
    }
  });

  test("files: write and read bytes, a range, and an archive round trip", async () => {
    const data = new Uint8Array(256).map((_, i) => i);
    const w = await vm.writeFile("/workspace/sdk/a.bin", data, { mkdirs: true });
    assert.equal(w.size, 256);
    assert.deepEqual(await vm.readFile("/workspace/sdk/a.bin"), data);
    assert.deepEqual(await vm.readFile("/workspace/sdk/a.bin", { offset: 10, length: 5 }), data.slice(10, 15));
    assert.deepEqual(await vm.readFile("/workspace/sdk/a.bin", { offset: -3 }), data.slice(253));
    const r = await vm.readFileStream("/workspace/sdk/a.bin", { offset: 100, length: 10 });
    assert.equal(r.partial, true);
    assert.equal(r.start, 100);
    assert.equal(r.length, 10);
    assert.equal(r.size, 256);
    await r.body.cancel();
    await vm.writeFile("/workspace/sdk/t.txt", "text ✓");
    assert.equal(await vm.readTextFile("/workspace/sdk/t.txt"), "text ✓");
    await assert.rejects(vm.readFile("/workspace/sdk/a.bin", { offset: 1000, length: 1 }), (e) => isCode(e, "range_not_satisfiable"));

    const tar = await vm.downloadArchive("/workspace/sdk");
    const res = await vm.uploadArchive("/workspace/copy", tar, { mkdirs: true });
    assert.ok(res.files >= 2, JSON.stringify(res));
    const entries = await vm.listDir("/workspace/copy", { recursive: true });
    const copied = entries.find((e) => e.name === "a.bin");
    assert.ok(copied, JSON.stringify(entries));
    assert.deepEqual(await vm.readFile(copied.path), data);
  });

  test("shell attach over a WebSocket, and a resume with after", async () => {
    const shell = await vm.openShell({ shell: "bash", cols: 80, rows: 24 });
    const conn = shell.attach();
    await conn.opened();
    conn.resize(100, 30);
    conn.send("echo hi-$((6*7))\r");
    let out = "";
    for await (const ev of conn) {
      if (ev.type === "output") out += text(ev.data);
      if (out.includes("hi-42")) break;
    }
    assert.match(out, /hi-42/);
    const seq = conn.lastSeq;
    assert.ok(seq > 0);

    const again = shell.attach({ after: seq });
    await again.opened();
    again.send("echo again-$((1+1))\r");
    let more = "";
    let first;
    for await (const ev of again) {
      if (ev.type !== "output") continue;
      first ??= ev.seq;
      more += text(ev.data);
      if (more.includes("again-2")) break;
    }
    assert.equal(first, seq + 1);
    assert.doesNotMatch(more, /hi-42/);
    await shell.close();
  });

  test("shell attach takes input before the socket opens, and its loop ends when the shell exits", async () => {
    const shell = await vm.openShell({ cols: 80, rows: 24 });
    const conn = shell.attach();
    // No opened() first: this is the README's example, which once threw
    // InvalidStateError ("Sent before connected").
    conn.send("echo hi-$((6*7)); exit 5\r");
    let out = "";
    let exit;
    for await (const ev of conn) {
      if (ev.type === "output") out += text(ev.data);
      if (ev.type === "exit") exit = ev;
    }
    assert.match(out, /hi-42/);
    assert.equal(exit?.exitCode, 5);
    assert.equal(exit.seq, conn.lastSeq);
  });

  test("process attach tells stdout from stderr and ends with the exit", async () => {
    const p = await vm.spawn({ command: "sleep 0.5; echo to-out; echo to-err >&2; exit 4" });
    const conn = vm.process(p.pid).attach();
    const streams = { stdout: "", stderr: "" };
    let exit;
    for await (const ev of conn) {
      if (ev.type === "output") streams[ev.stream] += text(ev.data);
      if (ev.type === "exit") exit = ev;
    }
    assert.deepEqual(streams, { stdout: "to-out\n", stderr: "to-err\n" });
    assert.equal(exit.exitCode, 4);
    assert.equal(exit.seq, conn.lastSeq);
  });

  test("a token can exec in its VM but not create a VM", async () => {
    const tok = await client.createToken({ scopes: ["vm:read", "exec"], vm: vm.id, ttlSeconds: 600, label: "sdk test" });
    const tc = new Client({ baseUrl: gw.base, token: tok.token });
    const r = await tc.vm(vm.id).exec({ command: "echo from-token" });
    assert.equal(r.stdoutText, "from-token\n");
    await assert.rejects(tc.createVM(), (e) => e instanceof AgentosError && e.status === 403 && e.code === "permission_denied");
    assert.ok((await client.tokens()).some((t) => t.id === tok.id));
    await client.revokeToken(tok.id);
    await assert.rejects(tc.vm(vm.id).get(), (e) => e instanceof AgentosError && e.status === 401);
  });

  test("errors carry the problem's status, code and details", async () => {
    await assert.rejects(client.vm("vm_doesnotexist").get(), (e) => {
      assert.ok(e instanceof AgentosError);
      assert.equal(e.status, 404);
      assert.equal(e.code, "not_found");
      assert.ok(e.requestId);
      return true;
    });
    await assert.rejects(vm.exec({ command: "true", cwd: "/no/such/dir" }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.code, "invalid_argument");
      assert.equal(e.details.field, "cwd");
      return true;
    });
  });

  test("an AbortSignal cancels a call and a stream", async () => {
    await assert.rejects(vm.get({ signal: AbortSignal.abort() }), (e) => e.name === "AbortError");
    const ac = new AbortController();
    const started = Date.now();
    await assert.rejects(async () => {
      for await (const ev of vm.execStream({ command: "echo start; sleep 20" }, { signal: ac.signal })) {
        if (ev.type === "stdout") ac.abort();
      }
    }, (e) => e.name === "AbortError");
    assert.ok(Date.now() - started < 15_000);
  });

  test("vms() iterates over the pages", async () => {
    const ids = [];
    for await (const v of client.vms({ limit: 1, labels: ["sdk=typescript"] })) ids.push(v.id);
    assert.deepEqual(ids, [vm.id]);
  });

  test("the tenant's webhook secret verifies what the gateway's algorithm signs", async () => {
    const { secret } = await client.webhookSecret();
    const body = '{"type":"vm.state"}';
    const now = new Date();
    const ts = Math.floor(now.getTime() / 1000);
    verifyWebhook(secret, { "agentos-webhook-timestamp": String(ts), "agentos-webhook-signature": signWebhook(secret, ts, body) }, body);
    const subs = [];
    for await (const w of client.webhooks()) subs.push(w);
    assert.deepEqual(subs, []);
  });
});

describe("verifyWebhook", () => {
  // Computed with webhook.Sign of the Go gateway.
  const secret = "whsec_0123456789abcdef";
  const body = '{"type":"exec.done","vm":"vm_1"}';
  const headers = new Headers({
    "Agentos-Webhook-Timestamp": "1800000000",
    "Agentos-Webhook-Signature": "v1=c8c5d00579083ceb93716a0e985c83c3602568cb6083b471dd60746237bee9d8",
  });
  const at = (s) => new Date(s * 1000);

  test("accepts the gateway's signature within the tolerance", () => {
    verifyWebhook(secret, headers, body, { now: at(1800000000 + 299) });
    verifyWebhook(secret, headers, new TextEncoder().encode(body), { now: at(1800000000 - 299) });
    assert.equal(signWebhook(secret, 1800000000, body), headers.get("Agentos-Webhook-Signature"));
  });

  test("refuses a changed body, a wrong secret and a stale timestamp", () => {
    const reason = (r) => (e) => e instanceof WebhookVerificationError && e.reason === r;
    assert.throws(() => verifyWebhook(secret, headers, body + " ", { now: at(1800000000) }), reason("bad_signature"));
    assert.throws(() => verifyWebhook("whsec_other", headers, body, { now: at(1800000000) }), reason("bad_signature"));
    assert.throws(() => verifyWebhook(secret, headers, body, { now: at(1800000000 + 301) }), reason("stale"));
    assert.throws(() => verifyWebhook(secret, {}, body), reason("stale"));
  });
});
