// Unit tests of usage-rows.js: what the VM page's Usage section says of
// a running VM with and without its own sidecar, before the engine counted
// its files, and of a hibernated VM. Run with `node --test web/src/`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { usageRows } from "./usage-rows.js";

const rows = (u) => Object.fromEntries(usageRows(u).map(([term, value]) => [term, value]));

test("a VM with its own sidecar shows every figure, with its limits", () => {
  const got = rows({
    vmId: "vm_1", state: "ready", collectedAt: "2026-01-02T03:04:05Z", ownSidecar: true,
    memoryBytes: 300 * 1024 ** 2, cpuSeconds: 1.5, filesystemBytes: 5 * 1024 ** 2, inodes: 376,
    processes: { running: 1, exited: 2 },
    handles: { openFds: 4, pipes: 1, ptys: 0, sockets: 2, socketListeners: 1, socketConnections: 1 },
    limits: { processes: 256, openFds: 256, sockets: 256, filesystemBytes: 64 * 1024 ** 2, inodes: 16384 },
  });
  assert.deepEqual(got, {
    "Memory": "300 MiB (its sidecar)",
    "CPU time": "1.50 s",
    "Processes": "1 of 256 running, 2 exited",
    "Files": "5.0 MiB of 64 MiB, 376 of 16384 inodes",
    "Open files": "4 of 256",
    "Sockets": "2 of 256 (1 listening, 1 connected)",
  });
});

test("figures the engine cannot give say why", () => {
  const got = rows({
    vmId: "vm_1", state: "ready", collectedAt: "2026-01-02T03:04:05Z", ownSidecar: false,
    processes: { running: 0, exited: 0 },
    handles: { openFds: 0, pipes: 0, ptys: 0, sockets: 0, socketListeners: 0, socketConnections: 0 },
  });
  assert.equal(got["Memory"], "— (its sidecar runs other tenants' VMs)");
  assert.equal(got["CPU time"], "—");
  assert.equal(got["Files"], "— (not counted before the first file write)");
  assert.equal(got["Processes"], "0 running, 0 exited");
});

test("a hibernated VM shows its stored image alone", () => {
  const got = usageRows({ vmId: "vm_1", state: "hibernated", collectedAt: "2026-01-02T03:04:05Z", ownSidecar: false, imageBytes: 2048 });
  assert.deepEqual(got, [["Stored image", "2.0 KiB", "usage-image"]]);
});

test("a waking VM shows its stored image, if it has one", () => {
  assert.deepEqual(usageRows({ vmId: "vm_1", state: "waking", collectedAt: "2026-01-02T03:04:05Z", ownSidecar: false }),
    [["Stored image", "—", "usage-image"]]);
});
