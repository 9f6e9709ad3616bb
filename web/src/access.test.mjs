// Unit tests of access.js with node:test: the tab's key and the scopes of a
// token sign-in. sessionStorage, which Node does not have, is a stand-in.
import { test, beforeEach, afterEach } from "node:test";
import assert from "node:assert/strict";
import { allowed, getKey, isKey, setKey, setScopes } from "./access.js";

class MemoryStorage {
  #m = new Map();
  getItem(k) { return this.#m.has(k) ? this.#m.get(k) : null; }
  setItem(k, v) { this.#m.set(k, String(v)); }
  removeItem(k) { this.#m.delete(k); }
}

beforeEach(() => { globalThis.sessionStorage = new MemoryStorage(); });
afterEach(() => { delete globalThis.sessionStorage; setScopes(null); });

test("the key is kept in the tab's storage until it is cleared", () => {
  assert.equal(getKey(), "");
  setKey("k_1");
  assert.equal(getKey(), "k_1");
  setKey("");
  assert.equal(getKey(), "");
  assert.equal(sessionStorage.getItem("agentos-gateway.key"), null);
});

test("a key may do everything; a token only what its scopes allow", () => {
  assert.ok(isKey());
  assert.ok(allowed("vm:write"));
  setScopes(["vm:read"]);
  assert.ok(!isKey());
  assert.ok(allowed("vm:read"));
  assert.ok(!allowed("vm:write"));
  setScopes(null);
  assert.ok(isKey());
});
