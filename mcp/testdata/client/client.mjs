// The official TypeScript MCP client against the gateway's MCP server, over
// one transport: "http" (Streamable HTTP at the gateway's /mcp) or "stdio"
// (`agentos mcp` started as a process). cmd/agentos/mcp_test.go runs it
// with a real gateway; it exits non-zero, saying why, when a check fails.
//
// Environment: MCP_TRANSPORT (http or stdio), AGENTOS_URL and
// AGENTOS_API_KEY (the gateway and a tenant key), AGENTOS_CLI (the agentos
// binary, for stdio).
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';

const transportName = process.env.MCP_TRANSPORT;
const gatewayURL = process.env.AGENTOS_URL;
const key = process.env.AGENTOS_API_KEY;
assert.ok(gatewayURL && key, 'AGENTOS_URL and AGENTOS_API_KEY are required');

const tools = ['create_vm', 'list_vms', 'hibernate_vm', 'delete_vm', 'exec', 'read_file', 'write_file',
  'list_files', 'delete_file', 'spawn_process', 'read_process_log', 'open_preview'];

// connect opens a client session with the credential secret.
async function connect(secret) {
  let transport;
  switch (transportName) {
    case 'http':
      transport = new StreamableHTTPClientTransport(new URL('/mcp', gatewayURL), {
        requestInit: { headers: { Authorization: `Bearer ${secret}` } },
      });
      break;
    case 'stdio':
      transport = new StdioClientTransport({
        command: process.env.AGENTOS_CLI,
        args: ['mcp'],
        env: { ...getDefaultEnvironment(), AGENTOS_URL: gatewayURL, AGENTOS_API_KEY: secret },
        stderr: 'inherit',
      });
      break;
    default:
      throw new Error(`MCP_TRANSPORT=${transportName}: want http or stdio`);
  }
  const client = new Client({ name: 'agentos-gateway-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

// call calls a tool that must succeed and returns its structured content.
async function call(client, name, args, options) {
  const res = await client.callTool({ name, arguments: args }, undefined, options);
  assert.ok(!res.isError, `${name} failed: ${JSON.stringify(res.content)}`);
  assert.ok(res.structuredContent, `${name} returned no structured content`);
  return res.structuredContent;
}

// step runs one check, naming it when it fails.
async function step(name, fn) {
  try {
    await fn();
  } catch (err) {
    err.message = `${transportName}: ${name}: ${err.message}`;
    throw err;
  }
}

const client = await connect(key);
let vm;
let tokenId;
try {
  await step('the tools are listed, each with an output schema', async () => {
    const { tools: listed } = await client.listTools();
    const names = listed.map((t) => t.name);
    for (const name of tools) {
      assert.ok(names.includes(name), `${name} is not listed: ${names}`);
    }
    for (const t of listed) {
      assert.equal(t.outputSchema?.type, 'object', `${t.name} has no output schema`);
    }
  });

  await step('create_vm', async () => {
    const created = await call(client, 'create_vm', { labels: { test: `mcp-${transportName}` } });
    assert.match(created.id, /\S/);
    vm = created.id;
  });

  await step('list_vms finds it by label', async () => {
    const { vms } = await call(client, 'list_vms', { labels: { test: `mcp-${transportName}` } });
    assert.deepEqual(vms.map((v) => v.id), [vm]);
  });

  await step('exec echo hi', async () => {
    const out = await call(client, 'exec', { vm, command: 'echo hi' });
    assert.equal(out.exitCode, 0);
    assert.equal(out.stdout, 'hi\n');
  });

  await step('exec reports the output as progress while the command runs', async () => {
    const progress = [];
    const started = Date.now();
    const out = await call(client, 'exec', { vm, command: 'for i in 1 2 3; do echo line$i; sleep 0.5; done' },
      { onprogress: (p) => progress.push({ ...p, at: Date.now() }) });
    const ended = Date.now();
    assert.equal(out.stdout, 'line1\nline2\nline3\n');
    for (let i = 1; i < progress.length; i++) {
      assert.ok(progress[i].progress > progress[i - 1].progress, 'progress must grow');
    }
    assert.equal(progress[0]?.message, 'started', JSON.stringify(progress));
    const lines = progress.filter((p) => p.message.startsWith('stdout: '));
    assert.ok(lines.length >= 2, `${lines.length} notifications of output: ${JSON.stringify(progress)}`);
    assert.match(lines[0].message, /line1/);
    assert.match(lines.map((p) => p.message).join(''), /line3/);
    // The first line came while the command still ran (it runs ~1.5 s),
    // not with the result.
    assert.ok(ended - lines[0].at >= 500, `the first line came ${ended - lines[0].at} ms before the result, after ${lines[0].at - started} ms`);
  });

  await step('a quiet command (heartbeats on the stream meanwhile) ends with its result', async () => {
    const out = await call(client, 'exec', { vm, command: 'sleep 2.5; echo done' }, { onprogress: () => {} });
    assert.equal(out.stdout, 'done\n');
  });

  await step('exec with an idempotencyKey runs once: a call again answers the first outcome', async () => {
    const key = `mcp-once-${transportName}-${Date.now()}`;
    const args = { vm, command: 'sh -c "echo ran >> /tmp/mcp-once.txt; wc -l < /tmp/mcp-once.txt"', idempotencyKey: key };
    const first = await call(client, 'exec', args);
    const again = await call(client, 'exec', args);
    assert.equal(first.stdout.trim(), '1');
    assert.equal(again.stdout, first.stdout);
    const read = await call(client, 'read_file', { vm, path: '/tmp/mcp-once.txt' });
    assert.equal(read.content, 'ran\n');
    // Without a key each call is a run of its own.
    const other = await call(client, 'exec', { vm, command: 'sh -c "echo ran >> /tmp/mcp-once.txt; wc -l < /tmp/mcp-once.txt"' });
    assert.equal(other.stdout.trim(), '2');
  });

  await step('a command that fails is a result, not a tool error', async () => {
    const out = await call(client, 'exec', { vm, command: 'sh -c "echo oops >&2; exit 3"' });
    assert.equal(out.exitCode, 3);
    assert.equal(out.stderr, 'oops\n');
  });

  await step('write_file, read_file, list_files, delete_file', async () => {
    await call(client, 'write_file', { vm, path: '/tmp/mcp/hello.txt', content: 'hello from mcp\n', mkdirs: true });
    const read = await call(client, 'read_file', { vm, path: '/tmp/mcp/hello.txt' });
    assert.equal(read.content, 'hello from mcp\n');
    assert.equal(read.encoding, 'utf-8');
    const { entries } = await call(client, 'list_files', { vm, path: '/tmp/mcp' });
    assert.deepEqual(entries.map((e) => e.name), ['hello.txt']);
    await call(client, 'delete_file', { vm, path: '/tmp/mcp/hello.txt' });
    const gone = await client.callTool({ name: 'read_file', arguments: { vm, path: '/tmp/mcp/hello.txt' } });
    assert.ok(gone.isError, 'a deleted file was read');
  });

  await step('spawn_process and read_process_log', async () => {
    const p = await call(client, 'spawn_process', { vm, command: 'sh -c "echo started; sleep 1; echo done"' });
    assert.ok(p.pid > 0);
    let log = { running: true, stdout: '' };
    let after;
    const deadline = Date.now() + 30_000;
    while (log.running) {
      assert.ok(Date.now() < deadline, `the process did not exit: ${JSON.stringify(log)}`);
      const next = await call(client, 'read_process_log', { vm, pid: p.pid, waitSeconds: 5, ...(after ? { after } : {}) });
      log = { ...next, stdout: log.stdout + next.stdout };
      after = next.next;
    }
    assert.equal(log.stdout, 'started\ndone\n');
    assert.equal(log.exitCode, 0);
  });

  await step('open_preview', async () => {
    const preview = await call(client, 'open_preview', { vm, port: 8080 });
    assert.ok(preview.url.startsWith(`${gatewayURL}/p/`), `preview URL ${preview.url}`);
  });

  await step('a token without the exec scope gets a tool error for exec', async () => {
    const resp = await fetch(new URL('/v1/tokens', gatewayURL), {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ scopes: ['vm:read', 'files:read'], vm, ttlSeconds: 300 }),
    });
    const created = await resp.text();
    assert.equal(resp.status, 201, created);
    const { token, id } = JSON.parse(created);
    tokenId = id;
    const limited = await connect(token);
    try {
      const res = await limited.callTool({ name: 'exec', arguments: { vm, command: 'echo hi' } });
      assert.equal(res.isError, true, `exec with a token without exec: ${JSON.stringify(res)}`);
      assert.match(res.content[0].text, /lacks the scope exec/);
      // The token is good for what its scopes allow.
      const { entries } = await call(limited, 'list_files', { vm, path: '/tmp' });
      assert.ok(Array.isArray(entries));
    } finally {
      await limited.close();
    }
  });

  await step('the audit trail records the tool calls as the REST calls they are', async () => {
    // The records are written once each call's handler returned.
    const deadline = Date.now() + 15_000;
    for (;;) {
      const resp = await fetch(new URL(`/v1/audit?vm=${vm}`, gatewayURL), { headers: { Authorization: `Bearer ${key}` } });
      const body = await resp.text();
      assert.equal(resp.status, 200, body);
      const { items } = JSON.parse(body);
      const ran = items.some((r) => r.method === 'POST' && r.route === '/v1/vms/{vm}/exec' && r.status === 200 && !r.token);
      const refused = items.some((r) => r.method === 'POST' && r.route === '/v1/vms/{vm}/exec' && r.status === 403 && r.token === tokenId);
      if (ran && refused) break;
      assert.ok(Date.now() < deadline, `no audit record of the exec (${ran}) and of the token's refused exec (${refused}): ${body}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  });

  await step('hibernate_vm', async () => {
    const h = await call(client, 'hibernate_vm', { vm });
    assert.ok(['hibernating', 'hibernated'].includes(h.state), `state ${h.state}`);
  });
} finally {
  if (vm) {
    await step('delete_vm', async () => {
      const d = await call(client, 'delete_vm', { vm });
      assert.ok(['disposing', 'disposed'].includes(d.state), `state ${d.state}`);
    });
  }
  await client.close();
}
console.log(`${transportName}: ok`);
