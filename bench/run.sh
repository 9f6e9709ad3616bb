#!/usr/bin/env bash
# Runs the official Node SDK (bench/official.mjs) and the Go client's
# benchmarks (agentos/bench_test.go) on this machine, against the same sidecar
# binary, and prints a Markdown table comparing them.
#
#   bench/run.sh                      # from any directory
#   EXEC_N=30 CREATE_N=5 LARGE_N=3 bench/run.sh
#
# EXEC_N iterations of each exec operation, CREATE_N VM creations, LARGE_N
# iterations of each large transfer, on both sides. Latency rows compare
# medians; transfer rows compare throughput. The ratio is always Go's time
# over the official SDK's time: below 1.0 the Go client is faster.
#
# Progress and logs go to stderr; the table to stdout. Exits non-zero when
# either side fails. Every sidecar started here is gone when it returns.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH="$ROOT/bench"
EXEC_N=${EXEC_N:-30}
CREATE_N=${CREATE_N:-5}
LARGE_N=${LARGE_N:-3}
GO=${GO:-go}

log() { printf 'bench: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for n in "$EXEC_N" "$CREATE_N" "$LARGE_N"; do
	[[ "$n" =~ ^[1-9][0-9]*$ ]] || die "iteration counts must be positive integers (got '$n')"
done
command -v node >/dev/null || die "node is required"
command -v npm >/dev/null || die "npm is required"
command -v "$GO" >/dev/null || die "go is required"

make -s -C "$ROOT" setup >&2
export AGENTOS_SIDECAR_BIN="$ROOT/deps/agentos/node_modules/@rivet-dev/agentos-sidecar-linux-x64-gnu/agentos-sidecar"
[[ -x "$AGENTOS_SIDECAR_BIN" ]] || die "no sidecar at $AGENTOS_SIDECAR_BIN after make setup"

# package-lock.json was written by `npm install --ignore-scripts`, plus six
# {"optional": true} placeholders for the darwin/linux-arm64 sidecar packages,
# which the registry does not have: without them npm >= 11.16 rejects its own
# lockfile in `npm ci` (npm/cli#9846). Keep them if the lockfile is regenerated.
if [[ ! -d "$BENCH/node_modules/@rivet-dev/agentos-core" ]]; then
	log "installing the official SDK into bench/node_modules (npm ci)"
	(cd "$BENCH" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
fi

# Every sidecar started below inherits this variable, which is how the cleanup
# finds exactly ours (other sidecars on the machine are left alone).
export AGENTOS_BENCH_RUN="run-$$-$(date +%s%N)"
WORK=$(mktemp -d)

our_sidecars() {
	local env pid
	for env in /proc/[0-9]*/environ; do
		pid=${env#/proc/}
		pid=${pid%/environ}
		[[ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" == */agentos-sidecar ]] || continue
		if grep -qzxF "AGENTOS_BENCH_RUN=$AGENTOS_BENCH_RUN" "$env" 2>/dev/null; then
			echo "$pid"
		fi
	done
}

cleanup() {
	local rc=$? pids pid i
	for i in 1 2 3 4 5 6 7 8 9 10; do
		pids=$(our_sidecars)
		[[ -z "$pids" ]] && break
		sleep 0.5
	done
	if [[ -n "$pids" ]]; then
		log "warning: sidecars of this run still alive, killing: $(echo $pids)"
		for pid in $pids; do kill -KILL "$pid" 2>/dev/null || true; done
		rc=1
	fi
	if [[ -n "${PG_DIR:-}" ]]; then
		"$ROOT/scripts/postgres-test.sh" stop "$PG_DIR" >&2 || true
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

STATUS=0 # a failed step still gets its row in the table, and the exit status 1

# --- benchmarks ---------------------------------------------------------------
# The machine may be busy with other work, so the two clients run group by
# group, one right after the other, rather than one whole side after the other.
official() { # ops
	log "official SDK: node bench/official.mjs --only $1"
	if ! (cd "$BENCH" && node official.mjs --only "$1" --exec "$EXEC_N" --create "$CREATE_N" --large "$LARGE_N" \
		>"$WORK/official.part" 2>>"$WORK/official.log"); then
		grep -v 'warm worker\|restored session' "$WORK/official.log" | tail -n 20 >&2 || true
		log "error: official.mjs failed on some of: $1"
		STATUS=1
	fi
	tee -a "$WORK/official.jsonl" <"$WORK/official.part" >&2
}
# b.Loop benchmarks: setup runs once, then exactly N iterations.
gobench() { # regexp iterations [package]
	local pkg="${3:-./agentos/}"
	log "Go: go test -bench '$1' -benchtime=${2}x $pkg"
	if ! (cd "$ROOT" && "$GO" test -run '^$' -bench "$1" -benchtime="${2}x" -count=1 -timeout 30m "$pkg") \
		| tee -a "$WORK/go.txt" >&2; then
		log "error: go test failed on $1"
		STATUS=1
	fi
}
# The audit trail: what an audited request waits for, the store's write on
# its path (before) against a queued record (after), on SQLite.
gobench '^BenchmarkRecord$' 5000 ./audit/
# A restore from a checkpoint of a 100 MiB VM: its peak local disk against
# the merged image's size (before the layers were read in place: 2x).
gobench '^BenchmarkRestorePeakDisk$' 3 ./vms/
official create_vm,create_exec_echo_hi
gobench '^Benchmark(CreateVM|CreateExecEchoHi)$' "$CREATE_N"
# Create-to-first-output through the gateway, with a warm VM ready and
# without warm VMs; then CREATE_N bursts of 7 creates back to back on the
# default warm pool.
gobench '^BenchmarkCreateFirstOutput(Warm|Cold|Burst)$' "$CREATE_N" ./cmd/server/
official exec_true,exec_echo_hi,exec_cat_1mib
gobench '^Benchmark(ExecTrue|ExecEchoHi|ExecCat1MiB)$' "$EXEC_N"
# The gateway over HTTP on loopback, for the exec echo hi comparison.
gobench '^BenchmarkExecEchoHiHTTP$' "$EXEC_N" ./cmd/server/
# The same exec with a tenant key and with a scoped token, side by side.
gobench '^BenchmarkExecEchoHiToken$' "$EXEC_N" ./cmd/server/
# The outbox: exec echo hi with an Idempotency-Key for a tenant whose
# subscription gets its exec.done, beside one without; event-to-receipt.
gobench '^BenchmarkWebhooks$' "$EXEC_N" ./cmd/server/
# Placement: exec throughput of 8 clients (EXEC_N rounds) and node memory
# at 16 and 64 idle VMs, under pack and under spread.
gobench '^BenchmarkPlacement(Pack|Spread)$' "$EXEC_N" ./cmd/server/
# One tenant's VMs against another's (issue 20): tenant B's exec p50 while
# tenant A holds idle shells, stdin readers or a CPU loop, on one shared
# sidecar and under the default tenant affinity. NEIGHBOUR_EXECS execs per
# case (default 5); a stalled exec counts as the 30 s cap.
gobench '^BenchmarkNeighbours(Shared|Affinity)$' 1 ./cmd/server/
# Shell starts over the WebSocket attach: each types a line at its first
# prompt (SHELL_STARTS of them, default 200).
gobench '^BenchmarkShellStarts$' 1 ./cmd/server/
# One pi turn against the offline mock model, direct and through the gateway
# (with its durable record); the official SDK has no offline model here.
gobench '^BenchmarkPromptHello$' "$EXEC_N"
gobench '^BenchmarkPromptHelloHTTP$' "$EXEC_N" ./cmd/server/
# File watch of a 9,900-entry guest tree at the 500 ms scan floor.
gobench '^BenchmarkWatch10k$' "$CREATE_N" ./cmd/server/
# Forks over HTTP: per new VM, and the size-to-time curve (10, 50, 100 MiB).
gobench '^BenchmarkFork$' "$LARGE_N" ./cmd/server/
# Hibernation over HTTP: hibernate, and wake to first output against a create
# from a snapshot of the same data (1 and 100 MiB); sidecar RSS of 32 idle
# VMs, running and hibernated.
gobench '^BenchmarkHibernate$' "$LARGE_N" ./cmd/server/
# Checkpoints over HTTP: after 1 MiB changed in a 100 MiB VM, through the API
# and by a command, against the time of writing that 1 MiB through the API.
gobench '^BenchmarkCheckpoint$' "$LARGE_N" ./cmd/server/
official stream_50mib,write_read_4mib,write_read_16mib
gobench '^Benchmark(Stream50MiB|WriteRead4MiB|WriteRead16MiB)$' "$LARGE_N"
# Two gateway nodes on one PostgreSQL (a throwaway server unless
# AGENTOS_GATEWAY_TEST_POSTGRES names one): exec and a process's SSE stream
# on the VM's owner node and proxied through the other.
if [[ -z "${AGENTOS_GATEWAY_TEST_POSTGRES:-}" ]]; then
	PG_DIR=$(mktemp -d -t agentos-gateway-bench-pg.XXXXXX)
	AGENTOS_GATEWAY_TEST_POSTGRES=$("$ROOT/scripts/postgres-test.sh" start "$PG_DIR")
	export AGENTOS_GATEWAY_TEST_POSTGRES
fi
gobench '^BenchmarkClusterExec$' "$EXEC_N" ./cmd/server/
gobench '^BenchmarkClusterSSE$' "$LARGE_N" ./cmd/server/
# 15,000 idle SSE subscribers on one VM's events stream, the gateway in a
# process of its own (SUBSCRIBERS overrides the count): first on a fresh
# gateway as an operator sees it (net/http clients all at once, the kernel's
# VmRSS, the lowest sample over 30 s), then settled.
gobench '^BenchmarkIdleSubscribers$' 1 ./cmd/server/

# --- table ------------------------------------------------------------------
touch "$WORK/official.jsonl" "$WORK/go.txt"
node - "$WORK/official.jsonl" "$WORK/go.txt" <<'EOF'
const fs = require("node:fs");
const [officialFile, goFile] = process.argv.slice(2);

const official = {};
for (const line of fs.readFileSync(officialFile, "utf8").split("\n")) {
	if (!line.trim()) continue;
	const j = JSON.parse(line);
	official[j.op] = j;
}

// "BenchmarkExecTrue-2   30   85617679 ns/op   82.33 p50-ms ..." -> metrics by unit.
const goRes = {};
for (const line of fs.readFileSync(goFile, "utf8").split("\n")) {
	const m = line.match(/^Benchmark(\w+?)(-\d+)?\s+(\d+)\s+(.*)$/);
	if (!m) continue;
	const f = m[4].trim().split(/\s+/);
	const metrics = { n: Number(m[3]) };
	for (let i = 0; i + 1 < f.length; i += 2) metrics[f[i + 1]] = Number(f[i]);
	goRes[m[1]] = metrics;
}

const rows = [
	["create_vm", "CreateVM", "latency"],
	["exec_true", "ExecTrue", "latency"],
	["exec_echo_hi", "ExecEchoHi", "latency"],
	["exec_cat_1mib", "ExecCat1MiB", "latency"],
	["stream_50mib", "Stream50MiB", "throughput"],
	["write_read_4mib", "WriteRead4MiB", "throughput"],
	["write_read_16mib", "WriteRead16MiB", "throughput"],
];

const fmt = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
const missing = [];
const out = [
	"| operation | official SDK | Go client | ratio Go/official (time; < 1.0: Go faster) |",
	"|---|---|---|---|",
];
for (const [op, bench, kind] of rows) {
	const o = official[op];
	const g = goRes[bench];
	if (!o) missing.push(`official ${op}`);
	if (!g) missing.push(`Go Benchmark${bench}`);
	// write_read_16mib is expected to fail on the SDK: its failure is the result.
	if (o?.error && op !== "write_read_16mib") missing.push(`official ${op} (${o.error})`);
	let oCell, gCell, oVal, gVal;
	if (kind === "latency") {
		if (o && !o.error) { oVal = o.median_ms; oCell = `${fmt(o.median_ms)} ms (p95 ${fmt(o.p95_ms)}, n=${o.n})`; }
		if (g) { gVal = g["p50-ms"]; gCell = `${fmt(g["p50-ms"])} ms (p95 ${fmt(g["p95-ms"])}, n=${g.n})`; }
	} else {
		if (o && !o.error) { oVal = o.mib_per_s; oCell = `${fmt(o.mib_per_s)} MiB/s (median ${fmt(o.median_ms)} ms, n=${o.n})`; }
		if (g) { gVal = g["MiB/s"]; gCell = `${fmt(g["MiB/s"])} MiB/s (median ${fmt(g["p50-ms"])} ms, n=${g.n})`; }
	}
	if (o?.error) oCell = `fails: ${o.error.replace(/\|/g, "/")}`;
	let ratio = "n/a";
	if (oVal > 0 && gVal > 0) ratio = (kind === "latency" ? gVal / oVal : oVal / gVal).toFixed(2);
	out.push(`| ${op} | ${oCell ?? "missing"} | ${gCell ?? "failed or missing (see log)"} | ${ratio} |`);
}
console.log(out.join("\n"));

// The gateway's own target: exec echo hi over HTTP within 1.2x of the Go
// client called directly, and no slower than the official SDK in-process.
const h = goRes["ExecEchoHiHTTP"], d = goRes["ExecEchoHi"], o = official["exec_echo_hi"];
if (!h) missing.push("Go BenchmarkExecEchoHiHTTP");
if (h && d && o && !o.error) {
	console.log("\n| exec `echo hi` | p50 | ratio |\n|---|---|---|");
	console.log(`| gateway over HTTP | ${fmt(h["p50-ms"])} ms (p95 ${fmt(h["p95-ms"])}) | |`);
	console.log(`| Go client, direct | ${fmt(d["p50-ms"])} ms | HTTP/direct ${(h["p50-ms"] / d["p50-ms"]).toFixed(2)} (target <= 1.05) |`);
	console.log(`| official SDK, in-process | ${fmt(o.median_ms)} ms | HTTP/official ${(h["p50-ms"] / o.median_ms).toFixed(2)} (target <= 0.8) |`);
}
// Create-to-first-output: POST /v1/vms then exec `echo hi`, against
// AgentOs.create() + exec in-process.
const cw = goRes["CreateFirstOutputWarm"], cc = goRes["CreateFirstOutputCold"], cb = goRes["CreateFirstOutputBurst"],
	gc = goRes["CreateExecEchoHi"], oc = official["create_exec_echo_hi"];
if (!cw) missing.push("Go BenchmarkCreateFirstOutputWarm");
if (!cc) missing.push("Go BenchmarkCreateFirstOutputCold");
if (!cb) missing.push("Go BenchmarkCreateFirstOutputBurst");
if (!gc) missing.push("Go BenchmarkCreateExecEchoHi");
if (!oc || oc.error) missing.push("official create_exec_echo_hi");
if (cw && cc && cb && gc && oc && !oc.error) {
	console.log("\n| create-to-first-output (create, then exec `echo hi`) | p50 | ratio |\n|---|---|---|");
	console.log(`| official SDK, AgentOs.create() + exec | ${fmt(oc.median_ms)} ms (p95 ${fmt(oc.p95_ms)}, n=${oc.n}) | |`);
	console.log(`| Go client, direct, create + exec | ${fmt(gc["p50-ms"])} ms (p95 ${fmt(gc["p95-ms"])}, n=${gc.n}) | Go/official ${(gc["p50-ms"] / oc.median_ms).toFixed(2)} |`);
	console.log(`| gateway over HTTP, warm VM ready, at rest | ${fmt(cw["p50-ms"])} ms (p95 ${fmt(cw["p95-ms"])}, n=${cw.n}) | gateway/official ${(cw["p50-ms"] / oc.median_ms).toFixed(2)} (target <= 0.25) |`);
	console.log(`| gateway over HTTP, 7 creates back to back, default warm pool | ${fmt(cb["p50-ms"])} ms (p95 ${fmt(cb["p95-ms"])}, n=${cb.n * 7}, ${fmt(cb["hits/burst"])} warm hits per burst) | gateway/official ${(cb["p50-ms"] / oc.median_ms).toFixed(2)} (target <= 0.5) |`);
	console.log(`| gateway over HTTP, no warm VMs | ${fmt(cc["p50-ms"])} ms (p95 ${fmt(cc["p95-ms"])}, n=${cc.n}) | gateway/official ${(cc["p50-ms"] / oc.median_ms).toFixed(2)} (target <= 1.0); gateway/Go ${(cc["p50-ms"] / gc["p50-ms"]).toFixed(2)} |`);
}
// Placement: pack against spread, on the gateway's defaults otherwise.
const pp = goRes["PlacementPack"], ps = goRes["PlacementSpread"];
if (!pp) missing.push("Go BenchmarkPlacementPack");
if (!ps) missing.push("Go BenchmarkPlacementSpread");
if (pp && ps) {
	console.log("\n| placement | exec `echo hi`, 8 clients | node RSS per idle VM at 16 | at 64 (target <= 16 MiB) | sidecars at 16 / 64 | node RSS fresh / after the load |\n|---|---|---|---|---|---|");
	for (const [name, r] of [["pack", pp], ["spread", ps]]) {
		console.log(`| ${name} | ${fmt(r["exec/s"])} exec/s | ${fmt(r["MiB/VM@16"])} MiB | ${fmt(r["MiB/VM@64"])} MiB | ${r["sidecars@16"]} / ${r["sidecars@64"]} | ${fmt(r["base-MiB"])} / ${fmt(r["after-MiB"])} MiB |`);
	}
	console.log(`| pack/spread | ${(pp["exec/s"] / ps["exec/s"]).toFixed(2)} (throughput) | ${(pp["MiB/VM@16"] / ps["MiB/VM@16"]).toFixed(2)} | ${(pp["MiB/VM@64"] / ps["MiB/VM@64"]).toFixed(2)} | | |`);
}
// Neighbours: tenant B's exec p50 as a ratio to its baseline in the same
// run, with tenant A's load on the same sidecar and under tenant affinity.
const nsh = goRes["NeighboursShared"], naf = goRes["NeighboursAffinity"];
if (!nsh) missing.push("Go BenchmarkNeighboursShared");
if (!naf) missing.push("Go BenchmarkNeighboursAffinity");
if (nsh && naf) {
	const cell = (r, c) => c === "base"
		? `${fmt(r["base-ms"])} ms`
		: `${fmt(r[c + "-ms"])} ms, ${r[c + "-x"].toFixed(2)}x${r[c + "-capped"] > 0 ? ` (${r[c + "-capped"]} at the 30 s cap)` : ""}`;
	console.log("\n| tenant B's exec `echo hi` p50, while | one shared sidecar (engine) | tenant affinity (default) | target |\n|---|---|---|---|");
	for (const [c, what, target] of [
		["base", "nothing else runs (baseline)", ""],
		["shells1", "A holds 1 idle shell", "<= 1.25x"],
		["shells4", "A holds 4 idle shells", "<= 1.25x"],
		["shells8", "A holds 8 idle shells", "<= 1.25x"],
		["cat1", "A holds 1 `cat` waiting on stdin", "<= 1.25x"],
		["cat8", "A holds 8 `cat` waiting on stdin", "<= 1.25x"],
		["cpu", "A runs a CPU-bound loop", "<= 1.5x"],
		["own-shell", "B's own VM holds an idle shell", "<= 1.25x"],
	]) {
		console.log(`| ${what} | ${cell(nsh, c)} | ${cell(naf, c)} | ${target} |`);
	}
}
// Shell starts: every one must run the line typed at its first prompt.
const ss = goRes["ShellStarts"];
if (!ss) missing.push("Go BenchmarkShellStarts");
else {
	console.log("\n| shell starts over the WebSocket attach | value | target |\n|---|---|---|");
	console.log(`| ran the line typed at the first prompt | ${ss.ran} of ${ss.starts} | all |`);
	console.log(`| open to the line's output, p50 | ${fmt(ss["p50-ms"])} ms (p95 ${fmt(ss["p95-ms"])}) | |`);
}
// An agent turn: what the gateway (HTTP, store writes, fan-out) adds.
const ph = goRes["PromptHelloHTTP"], pd = goRes["PromptHello"];
if (!ph) missing.push("Go BenchmarkPromptHelloHTTP");
if (!pd) missing.push("Go BenchmarkPromptHello");
if (ph && pd) {
	console.log("\n| pi turn `hello` (offline mock model) | p50 | ratio |\n|---|---|---|");
	console.log(`| gateway over HTTP, events stored | ${fmt(ph["p50-ms"])} ms (p95 ${fmt(ph["p95-ms"])}) | |`);
	console.log(`| Go client, direct | ${fmt(pd["p50-ms"])} ms (p95 ${fmt(pd["p95-ms"])}) | HTTP/direct ${(ph["p50-ms"] / pd["p50-ms"]).toFixed(2)} |`);
}
// Scale-out: what the hop through another node costs (target: exec at most
// 1.1x, plus the loopback hop).
const ce = goRes["ClusterExec"], cs = goRes["ClusterSSE"];
if (!ce) missing.push("Go BenchmarkClusterExec");
if (!cs) missing.push("Go BenchmarkClusterSSE");
if (ce && cs) {
	console.log("\n| two nodes, one PostgreSQL | on the owner node | through the other node | ratio proxied/direct |\n|---|---|---|---|");
	console.log(`| exec \`echo hi\` (p50) | ${fmt(ce["direct-ms"])} ms | ${fmt(ce["proxied-ms"])} ms | ${ce["proxied/direct"].toFixed(2)} (target <= 1.1) |`);
	console.log(`| process output SSE, 16 MiB (median) | ${fmt(cs["direct-MiB/s"])} MiB/s | ${fmt(cs["proxied-MiB/s"])} MiB/s | ${cs["proxied/direct"].toFixed(2)} (throughput) |`);
}
// File watch: latencies and the CPU of one scan of 9,900 entries.
const w = goRes["Watch10k"];
if (!w) missing.push("Go BenchmarkWatch10k");
else {
	console.log("\n| file watch, 9,900 entries, 500 ms interval | value |\n|---|---|");
	console.log(`| API write to its event, p50 | ${fmt(w["p50-ms"])} ms (p95 ${fmt(w["p95-ms"])}) |`);
	console.log(`| guest write to its event | ${fmt(w["guest-ms"])} ms (interval ratio ${(w["guest-ms"] / 500).toFixed(2)}) |`);
	console.log(`| CPU of one scan (gateway + sidecar) | ${fmt(w["scan-cpu-ms"])} ms (${(w["scan-cpu-ms"] / 500 * 100).toFixed(0)}% of a core at the floor) |`);
}
// Forks: time per new VM and how the time grows with the tree.
const fk = goRes["Fork"];
if (!fk) missing.push("Go BenchmarkFork");
else {
	console.log("\n| fork over HTTP (median) | time | ratio |\n|---|---|---|");
	console.log(`| fork into 3, default tree (one snapshot frame), per new VM | ${fmt(fk["per-vm-ms"])} ms | ${(fk["per-vm-ms"] / fk["fork-ms"]).toFixed(2)} of a fork into 1 |`);
	console.log(`| fork into 1, default tree | ${fmt(fk["fork-ms"])} ms | |`);
	console.log(`| fork into 1, +10 MiB (walked, chunked) | ${fmt(fk["10mib-ms"])} ms | ${(fk["10mib-ms"] / fk["fork-ms"]).toFixed(1)}x the default tree |`);
	console.log(`| fork into 1, +50 MiB | ${fmt(fk["50mib-ms"])} ms | ${(fk["50mib-ms"] / fk["10mib-ms"]).toFixed(2)}x 10 MiB |`);
	console.log(`| fork into 1, +100 MiB | ${fmt(fk["100mib-ms"])} ms (${fmt(fk["MiB/s"])} MiB/s) | ${fk["100mib/10mib"].toFixed(2)}x 10 MiB |`);
}
// Hibernation: the wake against a create from a snapshot of the same data.
const hb = goRes["Hibernate"];
if (!hb) missing.push("Go BenchmarkHibernate");
else {
	console.log("\n| hibernation over HTTP (median) | 1 MiB | 100 MiB |\n|---|---|---|");
	console.log(`| hibernate | ${fmt(hb["hibernate-1mib-ms"])} ms | ${fmt(hb["hibernate-100mib-ms"])} ms |`);
	console.log(`| wake to first output (exec echo hi on the hibernated VM) | ${fmt(hb["wake-1mib-ms"])} ms | ${fmt(hb["wake-100mib-ms"])} ms |`);
	console.log(`| create fromSnapshot + exec echo hi (reference) | ${fmt(hb["fromsnapshot-1mib-ms"])} ms | ${fmt(hb["fromsnapshot-100mib-ms"])} ms |`);
	console.log(`| ratio, wake / reference (target <= 1.1) | ${hb["wake/fromsnapshot-1mib"].toFixed(2)} | ${hb["wake/fromsnapshot-100mib"].toFixed(2)} |`);
	console.log(`\n| sidecars' RSS, 32 idle VMs | running | hibernated |\n|---|---|---|`);
	console.log(`| MiB | ${fmt(hb["rss-32-running-mib"])} | ${fmt(hb["rss-32-hibernated-mib"])} |`);
}
// Tokens: a token's checks against a key's, on the same exec.
const tk = goRes["ExecEchoHiToken"];
if (!tk) missing.push("Go BenchmarkExecEchoHiToken");
else {
	console.log("\n| exec echo hi over HTTP (median) | key | token | ratio (target <= 1.05) |\n|---|---|---|---|");
	console.log(`| p50 | ${fmt(tk["key-p50-ms"])} ms | ${fmt(tk["token-p50-ms"])} ms | ${tk["token/key"].toFixed(3)} |`);
}
// Webhooks: the outbox's cost on an idempotent exec, and event latency.
const wh = goRes["Webhooks"];
if (!wh) missing.push("Go BenchmarkWebhooks");
else {
	console.log("\n| exec echo hi with an Idempotency-Key over HTTP (median) | no subscription | exec.done to a webhook | ratio (target <= 1.05) |\n|---|---|---|---|");
	console.log(`| p50 | ${fmt(wh["exec-p50-ms"])} ms | ${fmt(wh["exec-outbox-p50-ms"])} ms | ${wh["outbox/plain"].toFixed(3)} |`);
	console.log(`\n| event created to webhook received (median) | ${fmt(wh["event-to-receipt-p50-ms"])} ms |\n|---|---|`);
}
// Checkpoints: the cost of one after 1 MiB changed, against writing it.
const ck = goRes["Checkpoint"];
if (!ck) missing.push("Go BenchmarkCheckpoint");
else {
	console.log("\n| checkpoint of a 100 MiB VM over HTTP (median) | time | ratio to the write (target <= 3) |\n|---|---|---|");
	console.log(`| write 1 MiB through the files API (reference) | ${fmt(ck["write-1mib-ms"])} ms | |`);
	console.log(`| checkpoint after that write | ${fmt(ck["checkpoint-api-1mib-ms"])} ms | ${ck["ckpt/write-api"].toFixed(2)} |`);
	console.log(`| checkpoint after a command copied 1 MiB | ${fmt(ck["checkpoint-guest-1mib-ms"])} ms | ${ck["ckpt-guest/write"].toFixed(2)} |`);
	console.log(`| first checkpoint, full capture | ${fmt(ck["full-100mib-ms"])} ms | |`);
}
// Allocation-light transfers: what the Go client allocates per 16 MiB
// written and read back.
const wr16 = goRes["WriteRead16MiB"];
if (wr16 && wr16["B/op"] > 0) {
	const payload = 16 << 20;
	console.log(`\n| 16 MiB write+read, Go client | bytes allocated | ratio to the payload |\n|---|---|---|`);
	console.log(`| WriteFileFrom + ReadFileTo | ${fmt(wr16["B/op"] / (1 << 20))} MiB (${wr16["allocs/op"]} allocs) | ${(wr16["B/op"] / payload).toFixed(2)} (target <= 2) |`);
}
// Idle SSE subscribers: what each costs the gateway, and whether they leave
// anything behind.
const is = goRes["IdleSubscribers"];
if (!is) missing.push("Go BenchmarkIdleSubscribers");
else {
	console.log("\n| idle SSE subscribers, one VM's events | value | target |\n|---|---|---|");
	console.log(`| gateway RSS per subscriber as the kernel counts it (VmRSS, fresh gateway): ${is.subscribers} net/http clients connecting at once, lowest of samples every 2 s over 30 s held | ${fmt(is["kernel-KiB/subscriber"])} KiB | <= 16 KiB |`);
	console.log(`| the same, right after the last client connected | ${fmt(is["kernel-ramp-KiB/subscriber"])} KiB | |`);
	console.log(`| kernel RSS: before / right after the ramp / held (lowest) | ${fmt(is["kernel-rss-before-MiB"])} / ${fmt(is["kernel-rss-ramp-MiB"])} / ${fmt(is["kernel-rss-held-MiB"])} MiB | |`);
	console.log(`| gateway RSS per subscriber, settled: ${is.subscribers} raw connections 32 at a time after a warm-up wave, one sample after five collections | ${fmt(is["KiB/subscriber"])} KiB | |`);
	console.log(`| settled RSS: before / held / after they left | ${fmt(is["rss-base-MiB"])} / ${fmt(is["rss-held-MiB"])} / ${fmt(is["rss-after-MiB"])} MiB | |`);
	console.log(`| heap after GC, after a second wave left / after the first | ${fmt(is["heap-after-MiB"])} / ${fmt(is["heap-base-MiB"])} MiB (${is["heap-after/base"].toFixed(2)}) | <= 1.10 |`);
	console.log(`| heap after GC, after the first wave / fresh (goroutine descriptors kept) | ${fmt(is["heap-base-MiB"])} / ${fmt(is["heap-fresh-MiB"])} MiB (${is["heap-first/fresh"].toFixed(2)}) | |`);
}
const meta = official._meta;
if (meta) console.log(`\nofficial SDK ${meta.sdk} on node ${meta.node}; sidecar ${meta.sidecar_exe ?? "(not seen)"}`);
if (missing.length) {
	console.error(`bench: error: no result for: ${missing.join("; ")}`);
	process.exit(1);
}
EOF
[[ "$STATUS" == 0 ]] || die "some benchmarks failed (see above)"
