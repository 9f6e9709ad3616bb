// Compiled (never run) by `npm run check`: the public API used as the
// README shows, so that a change that breaks its types fails make test.
import { AgentosError, Client, isCode, type ExecStreamEvent, type ProcessStreamEvent } from "../src/index.js";
import { verifyWebhook } from "../src/webhook.js";

export async function example(baseUrl: string, apiKey: string): Promise<void> {
  const client = new Client({ baseUrl, apiKey });
  const vm = client.vm((await client.createVM({ labels: { app: "demo" } })).id);
  const res = await vm.exec({ command: "echo hi", timeoutMs: 10_000 }, { idempotencyKey: "k1" });
  const code: number = res.exitCode;
  const out: string = res.stdoutText;
  for await (const ev of vm.execStream({ argv: ["ls", "-la"] })) {
    const e: ExecStreamEvent = ev;
    if (e.type === "stdout" || e.type === "stderr") e.data satisfies Uint8Array;
    else if (e.type === "exit") e.exitCode satisfies number;
  }
  const p = await vm.spawn({ command: "sleep 1" });
  for await (const ev of vm.process(p.pid).follow({ after: 3, signal: AbortSignal.timeout(1000) })) {
    const e: ProcessStreamEvent = ev;
    if (e.type === "gap") e.to satisfies number;
  }
  const conn = (await vm.openShell({ cols: 80, rows: 24 })).attach({ after: 0 });
  conn.send("ls\r");
  conn.resize(100, 40);
  for await (const ev of conn) if (ev.type === "output") ev.data satisfies Uint8Array;
  const s = await vm.openSession({ agent: "pi" });
  for await (const ev of vm.session(s.id).events({ after: s.latestSequence })) if (ev.type === "durable") ev.event.sequence satisfies number;
  try {
    await vm.get();
  } catch (err) {
    if (err instanceof AgentosError && isCode(err, "not_found")) err.details.state satisfies string | undefined;
  }
  const tok = await client.createToken({ scopes: ["shells"], vm: vm.id, ttlSeconds: 900 });
  const page = new Client({ baseUrl, token: tok.token, WebSocket: globalThis.WebSocket });
  await page.vm(vm.id).shells();
  verifyWebhook("whsec", new Headers(), "{}");
  void code;
  void out;
}

// Client.request: any route, typed by its path template.
export async function anyRoute(client: Client): Promise<void> {
  const keys = await client.requestJSON("GET", "/v1/tenants/{tenant}/keys", { params: { tenant: "t_1" } });
  keys.items satisfies unknown[];
  const vm = await client.requestJSON("POST", "/v1/vms", { json: { labels: { a: "b" } } });
  vm.id satisfies string;
  const gone = await client.requestJSON("DELETE", "/v1/vms/{vm}/files", { params: { vm: vm.id }, query: { path: "/tmp/x" } });
  void gone;
  (await client.request("GET", "/v1/vms/{vm}/files", { params: { vm: vm.id }, query: { path: "/etc/hosts" }, accept: "*/*" })) satisfies Response;
  // @ts-expect-error: the template has a parameter to fill
  await client.request("GET", "/v1/vms/{vm}");
  // @ts-expect-error: no such route
  await client.request("GET", "/v1/nowhere");
  // @ts-expect-error: the body is a CreateVMRequest
  await client.request("POST", "/v1/vms", { json: { labels: 3 } });
  // @ts-expect-error: PUT is not a method of /v1/vms
  await client.request("PUT", "/v1/vms");
}
