// Unit tests of dom.js's pure helpers with node:test: the wording of ages
// and sizes and the KEY=value parser of the create forms. They need no
// browser: run them with `node --test web/src/` (make test does).
import { test } from "node:test";
import assert from "node:assert/strict";
import { age, bytes, parsePairs } from "./dom.js";

test("age says how long ago in the largest whole unit", (t) => {
  const now = Date.parse("2026-01-02T03:04:05Z");
  t.mock.method(Date, "now", () => now);
  const ago = (s) => age(new Date(now - s * 1000).toISOString());
  const cases = [
    [0, "0s"], [59, "59s"], [59.6, "1m"], [60, "1m"], [3599, "59m"],
    [3600, "1h"], [86399, "23h"], [86400, "1d"], [90 * 86400, "90d"],
    // A time in the future (a clock ahead of the gateway's) is now.
    [-30, "0s"],
  ];
  for (const [s, want] of cases) assert.equal(ago(s), want, `${s}s ago`);
});

test("bytes picks the unit and keeps about two significant digits", () => {
  const cases = [
    [0, "0 B"], [1, "1 B"], [1023, "1023 B"],
    [1024, "1.0 KiB"], [1536, "1.5 KiB"], [10 * 1024 - 1, "10.0 KiB"], [10 * 1024, "10 KiB"],
    [1024 ** 2, "1.0 MiB"], [5.25 * 1024 ** 3, "5.3 GiB"], [1024 ** 4, "1.0 TiB"],
    // TiB is the largest unit: beyond it the number grows.
    [2048 * 1024 ** 4, "2048 TiB"],
  ];
  for (const [n, want] of cases) assert.equal(bytes(n), want, `${n} bytes`);
});

test("parsePairs reads KEY=value lines and comma-separated pairs", () => {
  assert.deepEqual(parsePairs("", "env"), {});
  assert.deepEqual(parsePairs("A=1\nB = two words \n\n , C=", "env"), { A: "1", B: "two words", C: "" });
  assert.deepEqual(parsePairs("URL=http://x/?a=b", "env"), { URL: "http://x/?a=b" });
  assert.deepEqual(parsePairs("A=1,A=2", "env"), { A: "2" });
});

test("parsePairs names the form and the line it cannot read", () => {
  assert.throws(() => parsePairs("A=1\nnot a pair", "labels"), { message: 'labels: "not a pair" is not KEY=value' });
  assert.throws(() => parsePairs("=value", "env"), { message: 'env: "=value" is not KEY=value' });
});
