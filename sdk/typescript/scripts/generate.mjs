// Generates src/schema.ts from api/openapi.yaml with the pinned
// openapi-typescript. With --check it generates into a temporary directory
// instead and fails when src/schema.ts differs, so that make test catches a
// spec change whose types were not regenerated.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(fileURLToPath(new URL(".", import.meta.url)), "..");
const spec = resolve(pkg, "../../api/openapi.yaml");
const committed = join(pkg, "src/schema.ts");
const check = process.argv.includes("--check");

function generate(out) {
  // Defaults do not make request fields required: a caller may leave them out.
  execFileSync(join(pkg, "node_modules/.bin/openapi-typescript"), [spec, "--default-non-nullable", "false", "--output", out], {
    cwd: pkg,
    stdio: ["ignore", "ignore", "inherit"],
  });
}

if (!check) {
  generate(committed);
} else {
  const dir = mkdtempSync(join(tmpdir(), "agentos-sdk-schema-"));
  try {
    const fresh = join(dir, "schema.ts");
    generate(fresh);
    if (readFileSync(fresh, "utf8") !== readFileSync(committed, "utf8")) {
      console.error("sdk/typescript/src/schema.ts is stale against api/openapi.yaml: run `npm run generate` in sdk/typescript");
      process.exit(1);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
