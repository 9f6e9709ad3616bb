// The official Node SDK (@rivet-dev/agentos-core, pinned in package.json) doing
// the same operations, with the same sizes, as the Go benchmarks in
// agentos/bench_test.go. One JSON line per operation on stdout:
//
//   {"op":"exec_true","n":30,"median_ms":...,"p95_ms":...,"mean_ms":...}
//
// plus "mib_per_s" for transfers, or {"op":...,"error":"..."} when the SDK
// cannot do the operation. Sidecar logs go to stderr.
//
// Usage: node official.mjs [--exec N] [--create N] [--large N] [--only op,op]
// bench/run.sh runs it next to the Go benchmarks and prints the comparison.
//
// The sidecar is the same binary the Go client runs: AGENTOS_SIDECAR_BIN, by
// default deps/agentos/node_modules/@rivet-dev/agentos-sidecar-linux-x64-gnu/
// agentos-sidecar of this checkout.

import { spawn as spawnChild } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const defaultBin = join(here, "..", "deps", "agentos", "node_modules", "@rivet-dev",
	"agentos-sidecar-linux-x64-gnu", "agentos-sidecar");
process.env.AGENTOS_SIDECAR_BIN ??= defaultBin;
if (!existsSync(process.env.AGENTOS_SIDECAR_BIN)) {
	console.error(`official.mjs: no sidecar at ${process.env.AGENTOS_SIDECAR_BIN}: run \`make setup\``);
	process.exit(2);
}
// Imported after AGENTOS_SIDECAR_BIN is settled.
const { AgentOs } = await import("@rivet-dev/agentos-core");

const ALL_OPS = ["create_vm", "create_exec_echo_hi", "exec_true", "exec_echo_hi", "exec_cat_1mib", "stream_50mib",
	"write_read_4mib", "write_read_16mib"];

function parseArgs(argv) {
	const o = { exec: 30, create: 5, large: 3, only: ALL_OPS, child: false };
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const val = () => {
			if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
			return argv[++i];
		};
		const num = () => {
			const n = Number(val());
			if (!Number.isInteger(n) || n < 1) throw new Error(`${a} needs a positive integer`);
			return n;
		};
		switch (a) {
			case "--exec": o.exec = num(); break;
			case "--create": o.create = num(); break;
			case "--large": o.large = num(); break;
			case "--only": o.only = val().split(",").filter(Boolean); break;
			case "--child": o.child = true; break;
			default: throw new Error(`unknown argument ${a}`);
		}
	}
	for (const op of o.only) {
		if (!ALL_OPS.includes(op)) throw new Error(`unknown op ${op} (known: ${ALL_OPS.join(", ")})`);
	}
	return o;
}

const opts = parseArgs(process.argv.slice(2));

// A run never hangs: whatever happens, the process ends (the SDK's own exit
// handling then takes the sidecar down with it).
const watchdog = setTimeout(() => {
	console.error("official.mjs: gave up after 20 minutes");
	process.exit(3);
}, 20 * 60 * 1000);
watchdog.unref();

const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

// Same statistics as agentos/bench_test.go: median (mean of the two middle
// values for an even count), p95 by nearest rank, mean.
function stats(op, durations, bytesPerOp) {
	const s = [...durations].sort((a, b) => a - b);
	const n = s.length;
	const median = n % 2 === 0 ? (s[n / 2 - 1] + s[n / 2]) / 2 : s[(n - 1) / 2];
	const p95 = s[Math.min(n - 1, Math.max(0, Math.ceil(0.95 * n) - 1))];
	const total = s.reduce((a, b) => a + b, 0);
	const out = { op, n, median_ms: round(median), p95_ms: round(p95), mean_ms: round(total / n) };
	if (bytesPerOp) out.mib_per_s = round((bytesPerOp * n) / (1 << 20) / (total / 1000));
	return out;
}
const round = (x) => Math.round(x * 1000) / 1000;

async function timed(n, fn, after) {
	const d = [];
	for (let i = 0; i < n; i++) {
		const t0 = performance.now();
		const r = await fn(i);
		d.push(performance.now() - t0);
		if (after) await after(r);
	}
	return d;
}

async function execOk(vm, cmd) {
	const r = await vm.exec(cmd);
	if (r.exitCode !== 0) throw new Error(`exec ${cmd}: exit ${r.exitCode}, stderr ${JSON.stringify(r.stderr)}`);
	return r;
}

// A fresh VM per operation, its runtime warmed up with one `true`.
async function withVM(fn) {
	const vm = await AgentOs.create();
	try {
		await execOk(vm, "true");
		return await fn(vm);
	} finally {
		await vm.dispose();
	}
}

async function execLatency(op, cmd, n, check, bytesPerOp) {
	return withVM(async (vm) => {
		check(await execOk(vm, cmd)); // warm-up
		return stats(op, await timed(n, () => execOk(vm, cmd), check), bytesPerOp);
	});
}

// Identical bytes to benchCatFile in agentos/bench_test.go: printable ASCII,
// so exec's UTF-8 stdout string has exactly 1 MiB characters.
function catFile() {
	const line = 64;
	const data = Buffer.alloc(1 << 20);
	for (let i = 0; i < data.length; i++) {
		data[i] = i % line === line - 1 ? 0x0a : 0x61 + ((Math.floor(i / line) + (i % line)) % 26);
	}
	return data;
}

const STREAM_BYTES = 50 << 20;

async function stream(vm, bytes) {
	let n = 0;
	const p = await vm.spawn("head", ["-c", String(bytes), "/dev/zero"], {
		onStdout: (chunk) => { n += chunk.length; },
	});
	const exit = await vm.process.wait(p.pid);
	if (exit.exitCode !== 0 || n !== bytes) {
		throw new Error(`stream: exit ${JSON.stringify(exit)}, ${n} bytes, want exit 0 and ${bytes}`);
	}
}

const sha = (b) => createHash("sha256").update(b).digest("hex");

async function writeRead(op, size, n) {
	return withVM(async (vm) => {
		const data = randomBytes(size);
		const want = sha(data);
		const path = "/workspace/wr.bin";
		const round = async () => {
			await vm.writeFile(path, data);
			return vm.readFile(path);
		};
		const check = (got) => {
			if (got.length !== size || sha(got) !== want) {
				throw new Error(`${op}: read back ${got.length} bytes whose sha256 differs from the ${size} written`);
			}
		};
		check(await round()); // warm-up
		return stats(op, await timed(n, round, check), 2 * size);
	});
}

const ops = {
	async create_vm() {
		// Warm-up: the first create spawns the shared sidecar and loads the
		// software packages. Dispose is not timed, as in BenchmarkCreateVM.
		await (await AgentOs.create()).dispose();
		const d = [];
		for (let i = 0; i < opts.create; i++) {
			const t0 = performance.now();
			const vm = await AgentOs.create();
			d.push(performance.now() - t0);
			await vm.dispose();
		}
		return stats("create_vm", d);
	},
	async create_exec_echo_hi() {
		// Create-to-first-output: AgentOs.create(), then exec `echo hi` on
		// the new VM, whose first process pays the runtime's warm-up. The
		// same warm-up and untimed dispose as create_vm.
		await (await AgentOs.create()).dispose();
		const d = [];
		for (let i = 0; i < opts.create; i++) {
			const t0 = performance.now();
			const vm = await AgentOs.create();
			const r = await execOk(vm, "echo hi");
			d.push(performance.now() - t0);
			await vm.dispose();
			if (r.stdout !== "hi\n") throw new Error(`echo hi: stdout ${JSON.stringify(r.stdout)}`);
		}
		return stats("create_exec_echo_hi", d);
	},
	exec_true: () => execLatency("exec_true", "true", opts.exec, () => {}),
	exec_echo_hi: () => execLatency("exec_echo_hi", "echo hi", opts.exec, (r) => {
		if (r.stdout !== "hi\n") throw new Error(`echo hi: stdout ${JSON.stringify(r.stdout)}`);
	}),
	async exec_cat_1mib() {
		const data = catFile();
		const text = data.toString("latin1");
		return withVM(async (vm) => {
			await vm.writeFile("/workspace/1m.bin", data);
			const cmd = "cat /workspace/1m.bin";
			const check = (r) => {
				if (r.stdout.length !== 1 << 20 || r.stdout !== text) {
					throw new Error(`cat 1m.bin: ${r.stdout.length} characters of stdout, want the 1 MiB file`);
				}
			};
			check(await execOk(vm, cmd)); // warm-up
			return stats("exec_cat_1mib", await timed(opts.exec, () => execOk(vm, cmd), check), data.length);
		});
	},
	stream_50mib: () => withVM(async (vm) => {
		await stream(vm, 1024); // warm-up
		return stats("stream_50mib", await timed(opts.large, () => stream(vm, STREAM_BYTES)), STREAM_BYTES);
	}),
	write_read_4mib: () => writeRead("write_read_4mib", 4 << 20, opts.large),
	// writeFile/readFile send the whole file in one request; past ~8 MiB the
	// sidecar rejects reads and a 16 MiB write makes it exit, taking the other
	// VMs with it. So this one runs in a child process with a sidecar of its own.
	write_read_16mib: () => (opts.child
		? writeRead("write_read_16mib", 16 << 20, opts.large)
		: inChild("write_read_16mib")),
};

function inChild(op) {
	return new Promise((resolve) => {
		const args = [fileURLToPath(import.meta.url), "--child", "--only", op, "--large", String(opts.large)];
		const child = spawnChild(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"] });
		let out = "";
		child.stdout.on("data", (c) => { out += c; });
		const timer = setTimeout(() => child.kill("SIGKILL"), 5 * 60 * 1000);
		child.on("close", (code, signal) => {
			clearTimeout(timer);
			const line = out.split("\n").map((l) => l.trim()).filter(Boolean)
				.map((l) => { try { return JSON.parse(l); } catch { return null; } })
				.find((j) => j && j.op === op);
			resolve(line ?? { op, error: `child exited with ${signal ?? `code ${code}`} and no result` });
		});
	});
}

function sdkVersion() {
	try {
		const pkg = join(here, "node_modules", "@rivet-dev", "agentos-core", "package.json");
		return JSON.parse(readFileSync(pkg, "utf8")).version;
	} catch {
		return "unknown";
	}
}

// The binary of the sidecar this process spawned, read from /proc, to show
// that both clients ran the same one.
function sidecarExe() {
	for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
		try {
			const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
			const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
			if (ppid !== process.pid) continue;
			const exe = readlinkSync(`/proc/${pid}/exe`);
			if (exe.endsWith("agentos-sidecar")) return exe;
		} catch {
			// gone meanwhile, or not ours to read
		}
	}
	return null;
}

let failed = false;
try {
	for (const op of opts.only) {
		let res;
		try {
			res = await ops[op]();
		} catch (e) {
			res = { op, error: String(e?.stack ?? e).split("\n")[0].slice(0, 300) };
			if (!opts.child) failed = true;
		}
		emit(res);
		if (!opts.child && op === opts.only[0]) {
			emit({ op: "_meta", sdk: `@rivet-dev/agentos-core@${sdkVersion()}`, node: process.version, sidecar_exe: sidecarExe() });
		}
	}
} finally {
	// End the shared sidecar, so nothing outlives the script.
	try {
		await (await AgentOs.getSharedSidecar()).dispose();
	} catch (e) {
		console.error(`official.mjs: dispose shared sidecar: ${e}`);
	}
}
// An SDK whose sidecar died (write_read_16mib) can leave handles that keep
// the event loop alive; the results are out, so leave now.
process.exit(failed ? 1 : 0);
