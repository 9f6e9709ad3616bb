// Starts a real gateway (and, through it, a real sidecar) for the SDK's
// tests, as cmd/server/main_test.go's startBinary does, and stops it after.
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = resolve(fileURLToPath(new URL(".", import.meta.url)), "../../..");
export const adminKey = "sdk-test-admin-key-0123456789";

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

/**
 * Builds the gateway from the checkout (or takes AGENTOS_GATEWAY_BIN), runs
 * it on a free port with a data directory of its own, and waits for
 * /readyz. The returned stop kills it and waits for its exit.
 */
export async function startGateway() {
  const dir = mkdtempSync(join(tmpdir(), "agentos-sdk-ts-"));
  let bin = process.env.AGENTOS_GATEWAY_BIN;
  if (!bin) {
    bin = join(dir, "gw");
    execFileSync("go", ["build", "-o", bin, "./cmd/server"], { cwd: repoRoot, stdio: "inherit" });
  }
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let logs = "";
  // The gateway finds the engine under deps/ from its working directory.
  const child = spawn(bin, ["--addr", `127.0.0.1:${port}`, "--data-dir", join(dir, "data"), "--shutdown-grace", "5s", "--warm-vms", "1", "--on-shutdown", "dispose"], {
    cwd: repoRoot,
    env: { ...process.env, AGENTOS_GATEWAY_ADMIN_KEY: adminKey, TMPDIR: dir },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout.on("data", (b) => { logs += b; });
  child.stderr.on("data", (b) => { logs += b; });
  const exited = new Promise((res) => child.once("exit", res));
  // A test run that ends abruptly (an uncaught error, a closed pipe) must not
  // leave the gateway and its sidecars running.
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  // A graceful stop disposes the VMs and ends the sidecars (--on-shutdown
  // dispose); a gateway that does not stop within 15 s is killed.
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    }
    process.removeListener("exit", killOnExit);
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`the gateway exited (${child.exitCode}):\n${logs}`);
    }
    try {
      const r = await fetch(`${base}/readyz`);
      if (r.status === 200) break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`the gateway was not ready within 120 s:\n${logs}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { base, stop, logs: () => logs };
}
