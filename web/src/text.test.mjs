// Unit tests of text.js with node:test: how the console words the SDK's
// errors, and the paths it calls. The SDK's own tests cover what it does
// (event streams, retries, the WebSocket key); run these with
// `node --test web/src/` (make test does).
import { test } from "node:test";
import assert from "node:assert/strict";
import { describe, q, vmPath } from "./text.js";

// agentosError stands in for the SDK's AgentosError, which plain Node cannot
// import from its TypeScript sources: describe knows it by its name.
function agentosError(fields) {
  return Object.assign(new Error("agentos-gateway: an error"), { name: "AgentosError", title: "", detail: "", code: "", ...fields });
}

test("describe words the gateway's problems as the console always has", () => {
  assert.equal(describe(agentosError({ status: 404, title: "Not Found", detail: "VM vm_1 does not exist", code: "not_found" })),
    "Not Found: VM vm_1 does not exist (not_found)");
  assert.equal(describe(agentosError({ status: 409, detail: "busy" })), "busy");
  assert.equal(describe(agentosError({ status: 500, title: "Internal Server Error" })), "Internal Server Error: Internal Server Error");
  assert.equal(describe(agentosError({ status: 503 })), "HTTP 503");
  // A stream's final error event has no status and no title.
  assert.equal(describe(agentosError({ status: 0, detail: "the VM ended", code: "conflict" })), "the VM ended (conflict)");
});

test("describe words every other kind of error", () => {
  const abort = new Error("aborted");
  abort.name = "AbortError";
  assert.equal(describe(abort), "Cancelled.");
  assert.equal(describe(new Error("boom")), "boom");
  assert.equal(describe("plain"), "plain");
  assert.equal(describe(undefined), "undefined");
});

test("paths and queries are escaped", () => {
  assert.equal(vmPath("vm 1/x", "/files"), "/v1/vms/vm%201%2Fx/files");
  assert.equal(vmPath("vm_1"), "/v1/vms/vm_1");
  assert.equal(q({ path: "/a b", recursive: true }), "?path=%2Fa+b&recursive=true");
});
