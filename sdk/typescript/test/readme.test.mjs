// Every ```ts example of the Markdown that shows the SDK runs as pasted,
// against a real gateway: each is stripped of its types, written to a file of
// its own that imports "agentos-gateway" as a user's program would, and run
// in a node of its own with AGENTOS_URL and AGENTOS_API_KEY set. An example
// fails when it throws, or when it has not ended within its time (a loop
// that never ends, a WebSocket left open), and the examples together fail
// when they leave a VM behind.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import ts from "typescript";
import { Client } from "../dist/index.js";
import { adminKey, repoRoot, startGateway } from "./gateway.mjs";

const sources = ["README.md", "docs/clients.md", "sdk/typescript/README.md"];
const exampleTimeoutMs = 120_000;

/** The ```ts blocks of a Markdown file, with the line each starts on. */
function tsBlocks(markdown) {
  const blocks = [];
  const fence = /^```ts\n([\s\S]*?)^```$/gm;
  for (let m; (m = fence.exec(markdown)); ) {
    blocks.push({ line: markdown.slice(0, m.index).split("\n").length + 1, code: m[1] });
  }
  return blocks;
}

// Node 20 has a WebSocket only behind a flag (as make test runs the tests);
// the examples' node needs it as well.
const nodeFlags = execFileSync(process.execPath, ["-e", 'typeof WebSocket === "function" || console.log("--experimental-websocket")'], { env: {} })
  .toString()
  .trim()
  .split(/\s+/)
  .filter(Boolean);

function run(file, env) {
  return new Promise((resolve) => {
    execFile(process.execPath, [...nodeFlags, file], { env, timeout: exampleTimeoutMs, killSignal: "SIGKILL" }, (err, stdout, stderr) => {
      resolve({ err, stdout, stderr });
    });
  });
}

describe("the Markdown's TypeScript examples", { timeout: 900_000 }, () => {
  let gw;
  let dir;

  before(async () => {
    gw = await startGateway();
    // A project of the user's: "agentos-gateway" resolves to this package
    // (its package.json exports and the built dist/) through node_modules.
    dir = mkdtempSync(join(tmpdir(), "agentos-sdk-readme-"));
    mkdirSync(join(dir, "node_modules"));
    symlinkSync(join(repoRoot, "sdk/typescript"), join(dir, "node_modules", "agentos-gateway"), "dir");
    writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
  });

  after(async () => {
    await gw?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  for (const source of sources) {
    const blocks = tsBlocks(readFileSync(join(repoRoot, source), "utf8"));
    test(`${source} has TypeScript examples`, () => {
      assert.ok(blocks.length > 0, `no \`\`\`ts block in ${source}`);
    });
    for (const { line, code } of blocks) {
      test(`${source}:${line}`, async () => {
        const out = ts.transpileModule(code, {
          compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
          reportDiagnostics: true,
          fileName: "example.ts",
        });
        assert.deepEqual(out.diagnostics?.map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n")) ?? [], []);
        const file = join(dir, `${source.replace(/\W/g, "_")}_${line}.mjs`);
        writeFileSync(file, out.outputText);
        const env = { PATH: process.env.PATH, AGENTOS_URL: gw.base, AGENTOS_API_KEY: adminKey };
        const started = Date.now();
        const { err, stdout, stderr } = await run(file, env);
        const took = Date.now() - started;
        assert.ok(
          !err,
          `${source}:${line} ${err?.killed ? `had not ended after ${took} ms` : `failed (exit ${err?.code})`}\n` +
            `stdout:\n${stdout}\nstderr:\n${stderr}\nthe gateway:\n${gw.logs().slice(-4000)}`,
        );
      });
    }
  }

  test("the examples delete the VMs they create", async () => {
    const left = [];
    for await (const vm of new Client({ baseUrl: gw.base, apiKey: adminKey }).vms()) left.push(vm.id);
    assert.deepEqual(left, []);
  });
});
