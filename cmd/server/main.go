// Command server runs agentos-gateway: the REST API with its Server-Sent
// Event streams and WebSocket attaches, and the web console, over a pool of
// agentOS sidecars, on an embedded SQLite store by default or on a
// PostgreSQL store that several gateway nodes share.
package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/bindings"
	"github.com/agentos-gateway/agentos-gateway/cluster"
	"github.com/agentos-gateway/agentos-gateway/handlers"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
	"github.com/agentos-gateway/agentos-gateway/memtrim"
	"github.com/agentos-gateway/agentos-gateway/notify"
	"github.com/agentos-gateway/agentos-gateway/previews"
	"github.com/agentos-gateway/agentos-gateway/problemlistener"
	"github.com/agentos-gateway/agentos-gateway/schedules"
	"github.com/agentos-gateway/agentos-gateway/sessions"
	"github.com/agentos-gateway/agentos-gateway/sidecarpool"
	"github.com/agentos-gateway/agentos-gateway/snapshots"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/tracing"
	"github.com/agentos-gateway/agentos-gateway/vms"
	"github.com/agentos-gateway/agentos-gateway/vmspec"
	"github.com/agentos-gateway/agentos-gateway/warmpool"
	"github.com/agentos-gateway/agentos-gateway/watch"
	"github.com/agentos-gateway/agentos-gateway/web"
	"github.com/agentos-gateway/agentos-gateway/webhook"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Getenv, os.Stderr, nil)
	var help *helpRequested
	switch {
	case errors.As(err, &help):
		fmt.Fprint(os.Stdout, help.usage)
	case err != nil:
		fmt.Fprintln(os.Stderr, "agentos-gateway:", err)
		os.Exit(1)
	}
}

// helpRequested is parseConfig's answer to -h, -help or --help: the usage
// text to print before exiting with status 0.
type helpRequested struct{ usage string }

func (h *helpRequested) Error() string { return "help requested" }
func (h *helpRequested) Unwrap() error { return flag.ErrHelp }

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "AGENTOS_GATEWAY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// usage lists every flag with its meaning, built-in default and environment
// variable.
func usage(fs *flag.FlagSet, defaults map[string]string) string {
	var b strings.Builder
	b.WriteString("Usage: agentos-gateway [flags]\n\n")
	b.WriteString("agentos-gateway serves agentOS VMs over HTTP: REST, Server-Sent Events and WebSockets.\n")
	b.WriteString("Every flag can be set by its environment variable; a flag given on the command line wins.\n\nFlags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := defaults[f.Name]
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(&b, "  --%s\n        %s\n        default %s; env %s\n", f.Name, f.Usage, def, envName(f.Name))
	})
	b.WriteString("\nOther environment variables:\n")
	b.WriteString("  AGENTOS_GATEWAY_ADMIN_KEY   the admin API key (at least 24 characters); printed once on first start when unset\n")
	b.WriteString("  AGENTOS_SIDECAR_BIN         the agentos-sidecar binary (default: found under deps/agentos/node_modules)\n")
	b.WriteString("  AGENTOS_PACKAGES_DIR        the agentOS software packages (default: found under deps/agentos/node_modules)\n")
	b.WriteString("  AGENTOS_GATEWAY_CLUSTER_SECRET  signs the calls between nodes sharing a PostgreSQL store (at least 16 characters; the same on every node; required for more than one node)\n")
	b.WriteString("  AGENTOS_GATEWAY_WEBHOOK_SECRET  the tenants' webhook signing secrets are derived from it (at least 16 characters; default: derived from the cluster secret, else random at each start)\n")
	b.WriteString("  OTEL_EXPORTER_OTLP_ENDPOINT  OpenTelemetry collector URL: spans are exported over OTLP/HTTP when set (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; see the README's Traces)\n")
	return b.String()
}

// config is every setting, each a flag with a matching environment variable.
type config struct {
	addr               string
	dataDir            string
	storeDSN           string
	maxSidecars        int
	vmsPerSidecar      int
	minIdleSidecars    int
	sidecarIdleTimeout time.Duration
	memoryHighWater    int64
	warmVMs            int
	placement          sidecarpool.Placement
	tenantAffinity     bool
	maxBodyBytes       int64
	maxFileBytes       int64
	maxArchiveEntries  int
	maxPromptBytes     int64
	outputBufferBytes  int
	watchMaxEntries    int
	watchLogBytes      int
	execTimeoutDefault time.Duration
	execTimeoutMax     time.Duration
	shutdownGrace      time.Duration
	heartbeat          time.Duration
	memoryReturn       time.Duration
	permissionDefault  gateway.PermissionDefault
	sessionPurge       time.Duration
	corsOrigins        []string
	vmRetention        time.Duration
	bodyReadTimeout    time.Duration
	wakeTimeout        time.Duration
	hibernatedKeep     time.Duration
	checkpointEvery    time.Duration
	tokenMaxTTL        time.Duration
	auditRetention     time.Duration
	onIdle, onShutdown string
	logFormat          string
	logLevel           string
	nodeID             string
	advertiseAddr      string
	nodeHeartbeat      time.Duration
	nodeTimeout        time.Duration
	previewDomain      string
	mountAllow         []vmspec.MountRule
	// webhookAllow are the host patterns webhook targets must match.
	webhookAllow webhook.Targets
	// webhookRetryFor is how long event deliveries are retried.
	webhookRetryFor time.Duration
}

// parseConfig reads flags, falling back to AGENTOS_GATEWAY_<FLAG> variables.
// Flags whose text needs converting or checking are read in steps, one a
// concern; the steps run in a fixed order, which is the order of the
// messages when several flags are wrong.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	fs, defaults, t := defineFlags(&c, getenv)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, &helpRequested{usage: usage(fs, defaults)}
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	t.readLists(&c)
	t.readPool(&c)
	t.readLimits(&c)
	t.readTimings(&c)
	t.readCluster(&c)
	t.readPermissions(&c)
	t.checkRest(&c)
	t.deriveStore(&c)
	return c, t.err
}

// flagText is what was given for the flags that are converted or checked
// after parsing, as text, and the errors found in it so far.
type flagText struct {
	// nums are the numbers and durations, by flag name.
	nums                      map[string]*string
	placement, affinity       string
	decision                  string
	corsOrigins, webhookAllow string
	mountAllow                mountAllowFlag
	err                       error
}

// fail records one more wrong flag; every one is reported, not just the
// first.
func (t *flagText) fail(err error) { t.err = errors.Join(t.err, err) }

// atoi reads the non-negative integer flag name.
func (t *flagText) atoi(name string) int {
	n, e := strconv.Atoi(*t.nums[name])
	if e != nil || n < 0 {
		t.fail(fmt.Errorf("--%s: %q is not a non-negative integer", name, *t.nums[name]))
	}
	return n
}

// dur reads the non-negative duration flag name.
func (t *flagText) dur(name string) time.Duration {
	d, e := time.ParseDuration(*t.nums[name])
	if e != nil || d < 0 {
		t.fail(fmt.Errorf("--%s: %q is not a duration", name, *t.nums[name]))
	}
	return d
}

// defineFlags registers every flag with its default, its environment
// variable's value when set, and its meaning. String flags are read straight
// into c; the others into the returned flagText. defaults are the built-in
// defaults, for the usage text.
func defineFlags(c *config, getenv func(string) string) (fs *flag.FlagSet, defaults map[string]string, t *flagText) {
	fs = flag.NewFlagSet("agentos-gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defaults = map[string]string{}
	t = &flagText{nums: map[string]*string{}}
	env := func(name, def string) string {
		defaults[name] = def
		if v := getenv(envName(name)); v != "" {
			return v
		}
		return def
	}
	str := func(p *string, name, def, usage string) { fs.StringVar(p, name, env(name, def), usage) }
	num := func(name, def, usage string) {
		v := env(name, def)
		t.nums[name] = &v
		fs.StringVar(t.nums[name], name, v, usage)
	}
	str(&c.addr, "addr", "127.0.0.1:8080", "listen address")
	str(&c.dataDir, "data-dir", "data", "directory for the SQLite store and session databases")
	str(&c.storeDSN, "store", "", "store DSN: a SQLite file path or postgres://… (default: <data-dir>/gateway.db)")
	num("max-sidecars", "4", "maximum sidecar processes")
	num("vms-per-sidecar", "64", "VMs placed on one sidecar")
	num("min-idle-sidecars", "1", "fresh idle sidecars kept warm")
	num("sidecar-idle-timeout", "5m", "stop idle sidecars beyond the minimum after this long")
	num("memory-high-water", "805306368", "RSS bytes above which a sidecar takes no new VMs and is replaced once idle (0: off)")
	num("warm-vms", "4", "VMs kept created and warmed up ahead of demand, per isolation class (0: none)")
	str(&t.placement, "placement", "pack", "where new VMs go: pack fills a sidecar up to --vms-per-sidecar before using another, spread takes the least-loaded one")
	str(&t.affinity, "tenant-affinity", "true", "keep each tenant's VMs on sidecars holding no other tenant's while --max-sidecars allows one more, so that one tenant's stalled sidecar (a process waiting on stdin, a shell at its prompt) cannot slow another's VMs; false packs tenants together")
	num("max-body-bytes", "1048576", "largest JSON body or stdin upload")
	num("max-file-bytes", "1073741824", "largest file upload, and largest extracted total of an archive upload")
	num("max-archive-entries", "100000", "most entries of an archive upload")
	num("max-prompt-bytes", "8388608", "largest prompt body (prompts may carry images; the engine takes frames up to 16 MiB)")
	num("output-buffer-bytes", "1048576", "replay buffer per process and shell for Last-Event-ID")
	num("watch-max-entries", "10000", "most entries the file watches of one VM scan together")
	num("watch-log-bytes", "262144", "file watch events kept per VM for Last-Event-ID")
	num("exec-timeout-default", "10m", "deadline of an exec that sets no timeoutMs")
	num("exec-timeout-max", "1h", "largest timeoutMs an exec may ask for")
	num("shutdown-grace", "20s", "time in-flight requests get to finish on SIGTERM")
	num("heartbeat", "15s", "SSE heartbeat period")
	num("memory-return-interval", "5s", "how often the gateway looks for memory its runtime freed but keeps after a burst (a ramp of connections), returned to the system once allocation has calmed (0: left to the runtime's own pace)")
	str(&t.decision, "permission-decision", "reject", "decision taken for permission requests nobody answers in time (reject or allow), unless the tenant or session sets one")
	num("permission-timeout", "10m", "how long a permission request waits for an answer before the default decision")
	num("session-purge-interval", "1h", "how often sessions past their tenant's retention are deleted")
	str(&t.corsOrigins, "cors-origins", "", "comma-separated origins allowed to call the API from a browser, such as https://app.example.com (* for any; empty: same origin only)")
	num("vm-retention", "168h", "how long the records of ended (disposed or lost) VMs are kept before they are purged")
	num("hibernated-retention", "168h", "how long a VM may stay hibernated before it is deleted with its stored files (0: kept until deleted)")
	num("wake-timeout", "30s", "how long waking a hibernated VM may take before the request that needed it fails")
	num("audit-retention", "720h", "how long the audit trail's records (GET /v1/audit) are kept (0: for good)")
	num("webhook-retry-for", "24h", "how long an event delivery is retried before it fails; a subscription failing that long is disabled")
	num("token-max-ttl", "24h", "the longest life a tenant may give a token it mints (POST /v1/tokens, ttlSeconds)")
	num("checkpoint-interval", "0s", "how often the files of a running VM that sets no checkpointSeconds are checkpointed into the store, so that a VM lost with its sidecar or node can be restored under its id (0: never; whole seconds)")
	str(&c.onIdle, "on-idle", vms.OnIdleHibernate, "what becomes of a VM idle past its idleTimeoutSeconds that sets no onIdle: hibernate (its files kept in the store; it wakes under the same id on its next use) or dispose")
	str(&c.onShutdown, "on-shutdown", vms.OnIdleHibernate, "what becomes of the running VMs when the gateway stops: hibernate (each wakes on its next use, after a restart or through another node) or dispose")
	num("body-read-timeout", "30s", "how long a request body may go without delivering a byte before the request is refused with 408")
	host, _ := os.Hostname()
	str(&c.nodeID, "node-id", host, "this node's name among the gateways sharing the store (default: the host name)")
	str(&c.advertiseAddr, "advertise-addr", "", "the URL other nodes reach this one at, such as http://gw-0.gw:8080 (default: http://<listen address>, the host name for an unspecified address)")
	num("node-heartbeat", "2s", "how often this node records its heartbeat and load in the store")
	num("node-timeout", "10s", "how old a node's heartbeat must be for the others to declare it dead and mark its VMs lost")
	str(&c.previewDomain, "preview-domain", "", "domain under which {port}-{vm}.<domain> host-based preview URLs work too, such as preview.example.com (needs wildcard DNS; empty: path-based /p/{token}/ previews only)")
	if v := env("mount-allow", ""); v != "" {
		t.mountAllow.values = []string{v}
	}
	fs.Var(&t.mountAllow, "mount-allow", "host directories tenants may mount into VMs: PATH (read-only), PATH:ro or PATH:rw, comma-separated or repeated (empty: none)")
	str(&t.webhookAllow, "webhook-allow", "", "comma-separated host patterns webhook targets must match: names, *.example.com, IPs or CIDRs (empty: any public host); loopback and private addresses need an IP or CIDR pattern")
	str(&c.logFormat, "log-format", "json", "json or console")
	str(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	return fs, defaults, t
}

// readLists reads the list flags: CORS origins, mount rules and webhook
// targets.
func (t *flagText) readLists(c *config) {
	for o := range strings.SplitSeq(t.corsOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			c.corsOrigins = append(c.corsOrigins, o)
		}
	}
	var err error
	c.mountAllow, err = vmspec.ParseMountAllow(t.mountAllow.values)
	// The mount rules' error is the first that can be found, and is kept as
	// it is rather than joined.
	t.err = err
	targets, terr := webhook.ParseTargets(strings.Split(t.webhookAllow, ","))
	if terr != nil {
		t.fail(fmt.Errorf("--webhook-allow: %w", terr))
	}
	c.webhookAllow = targets
}

// readPool reads the sidecar pool's settings and the warm VMs.
func (t *flagText) readPool(c *config) {
	c.maxSidecars = t.atoi("max-sidecars")
	c.vmsPerSidecar = t.atoi("vms-per-sidecar")
	c.minIdleSidecars = t.atoi("min-idle-sidecars")
	c.sidecarIdleTimeout = t.dur("sidecar-idle-timeout")
	c.memoryHighWater = int64(t.atoi("memory-high-water"))
	c.warmVMs = t.atoi("warm-vms")
	if pl, e := sidecarpool.ParsePlacement(t.placement); e != nil {
		t.fail(fmt.Errorf("--placement: %w", e))
	} else {
		c.placement = pl
	}
	if b, e := strconv.ParseBool(t.affinity); e != nil {
		t.fail(fmt.Errorf("--tenant-affinity: %q is neither true nor false", t.affinity))
	} else {
		c.tenantAffinity = b
	}
}

// readLimits reads the bounds of requests, buffers and execs.
func (t *flagText) readLimits(c *config) {
	c.maxBodyBytes = int64(t.atoi("max-body-bytes"))
	c.maxFileBytes = int64(t.atoi("max-file-bytes"))
	c.maxArchiveEntries = t.atoi("max-archive-entries")
	c.maxPromptBytes = int64(t.atoi("max-prompt-bytes"))
	c.outputBufferBytes = t.atoi("output-buffer-bytes")
	c.watchMaxEntries = t.atoi("watch-max-entries")
	c.watchLogBytes = t.atoi("watch-log-bytes")
	c.execTimeoutDefault = t.dur("exec-timeout-default")
	c.execTimeoutMax = t.dur("exec-timeout-max")
	if c.execTimeoutDefault <= 0 || c.execTimeoutDefault > c.execTimeoutMax {
		t.fail(errors.New("--exec-timeout-default must be positive and at most --exec-timeout-max"))
	}
}

// readTimings reads the periods and timeouts of the server and its services.
func (t *flagText) readTimings(c *config) {
	c.shutdownGrace = t.dur("shutdown-grace")
	c.heartbeat = t.dur("heartbeat")
	c.memoryReturn = t.dur("memory-return-interval")
	c.sessionPurge = t.dur("session-purge-interval")
	c.vmRetention = t.dur("vm-retention")
	c.wakeTimeout = t.dur("wake-timeout")
	c.hibernatedKeep = t.dur("hibernated-retention")
	c.auditRetention = t.dur("audit-retention")
	if c.auditRetention < 0 {
		t.fail(errors.New("--audit-retention must not be negative"))
	}
	c.webhookRetryFor = t.dur("webhook-retry-for")
	if c.webhookRetryFor <= 0 {
		t.fail(errors.New("--webhook-retry-for must be positive"))
	}
	c.tokenMaxTTL = t.dur("token-max-ttl")
	if c.tokenMaxTTL < time.Second {
		t.fail(errors.New("--token-max-ttl must be at least 1s"))
	}
	c.checkpointEvery = t.dur("checkpoint-interval")
	if c.checkpointEvery < 0 || c.checkpointEvery%time.Second != 0 || c.checkpointEvery > 24*time.Hour {
		t.fail(errors.New("--checkpoint-interval must be whole seconds from 0 to 24h"))
	}
	if c.hibernatedKeep < 0 {
		t.fail(errors.New("--hibernated-retention must not be negative"))
	}
	if c.wakeTimeout <= 0 {
		t.fail(errors.New("--wake-timeout must be positive"))
	}
	for name, v := range map[string]string{"on-idle": c.onIdle, "on-shutdown": c.onShutdown} {
		if v != vms.OnIdleHibernate && v != vms.OnIdleDispose {
			t.fail(fmt.Errorf("--%s: %q is neither hibernate nor dispose", name, v))
		}
	}
	c.bodyReadTimeout = t.dur("body-read-timeout")
}

// readCluster reads how this node takes part in a cluster sharing the
// store.
func (t *flagText) readCluster(c *config) {
	c.nodeHeartbeat = t.dur("node-heartbeat")
	c.nodeTimeout = t.dur("node-timeout")
	if c.nodeHeartbeat <= 0 || c.nodeTimeout <= c.nodeHeartbeat {
		t.fail(errors.New("--node-heartbeat must be positive and shorter than --node-timeout"))
	}
	if !cluster.ValidNodeID(c.nodeID) {
		t.fail(fmt.Errorf("--node-id: %q must be letters, digits, '-', '.' or '_' (at most 253)", c.nodeID))
	}
	if c.advertiseAddr != "" {
		if u, e := url.Parse(c.advertiseAddr); e != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			t.fail(fmt.Errorf("--advertise-addr: %q is not an http(s)://host:port URL", c.advertiseAddr))
		}
		c.advertiseAddr = strings.TrimSuffix(c.advertiseAddr, "/")
	}
}

// readPermissions reads the default decision of agent permission requests.
func (t *flagText) readPermissions(c *config) {
	c.permissionDefault = gateway.PermissionDefault{Decision: t.decision, TimeoutSeconds: int(t.dur("permission-timeout").Seconds())}
	if t.decision != gateway.DecisionReject && t.decision != gateway.DecisionAllow {
		t.fail(fmt.Errorf("--permission-decision: %q is neither reject nor allow", t.decision))
	}
	if c.permissionDefault.TimeoutSeconds < 1 {
		t.fail(errors.New("--permission-timeout must be at least 1s"))
	}
}

// checkRest checks the settings read straight into c, and the pool's size
// (checked here, after the others, so that its message keeps its place).
func (t *flagText) checkRest(c *config) {
	if c.maxSidecars < 1 || c.vmsPerSidecar < 1 {
		t.fail(errors.New("--max-sidecars and --vms-per-sidecar must be at least 1"))
	}
	if c.logFormat != "json" && c.logFormat != "console" {
		t.fail(fmt.Errorf("--log-format: %q is not json or console", c.logFormat))
	}
	c.previewDomain = strings.ToLower(strings.Trim(c.previewDomain, "."))
	if c.previewDomain != "" && !validPreviewDomain(c.previewDomain) {
		t.fail(fmt.Errorf("--preview-domain: %q is not a domain name such as preview.example.com", c.previewDomain))
	}
}

// deriveStore settles where the gateway keeps its data.
func (t *flagText) deriveStore(c *config) {
	// The engine opens the session databases under the data directory from
	// its own working directory and refuses a relative path, so a relative
	// --data-dir is resolved here, once, against the gateway's.
	if abs, e := filepath.Abs(c.dataDir); e != nil {
		t.fail(fmt.Errorf("--data-dir: %w", e))
	} else {
		c.dataDir = abs
	}
	if c.storeDSN == "" {
		c.storeDSN = filepath.Join(c.dataDir, "gateway.db")
	}
}

// validPreviewDomain reports whether d is a host name of dot-separated
// labels of letters, digits and '-', under which {port}-{vm}.{d} can be.
func validPreviewDomain(d string) bool {
	if len(d) > 200 {
		return false
	}
	for label := range strings.SplitSeq(d, ".") {
		if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
			return false
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	return true
}

func newLogger(c config, out io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(c.logLevel)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("--log-level: %w", err)
	}
	if c.logFormat == "console" {
		out = zerolog.ConsoleWriter{Out: out, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}

// run starts the gateway and serves until ctx ends or SIGTERM/SIGINT. ready,
// when not nil, receives the listening address (tests use it).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready chan<- string) error {
	c, err := parseConfig(args, getenv)
	if err != nil {
		return err
	}
	log, err := newLogger(c, stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Deferred first, so run last: the spans of everything shutdown did
	// are flushed before the process ends.
	stopTraces, err := tracing.Setup(ctx, tracing.Config{NodeID: c.nodeID, Getenv: getenv, Log: log})
	if err != nil {
		return err
	}
	defer flushTraces(log, stopTraces)

	engine, db, err := openStore(ctx, c, log, getenv, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	secret := getenv("AGENTOS_GATEWAY_CLUSTER_SECRET")
	if secret != "" && len(secret) < 16 {
		return errors.New("AGENTOS_GATEWAY_CLUSTER_SECRET must be at least 16 characters")
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	advertise := c.advertiseAddr
	if advertise == "" {
		advertise = advertiseFrom(ln.Addr())
	}
	// ctx also ends when the node leaves the cluster on its own (a drain
	// that finished, or the other nodes declared it dead): the gateway then
	// shuts down as on SIGTERM.
	ctx, leave := context.WithCancelCause(ctx)
	defer leave(nil)

	if err := os.MkdirAll(filepath.Join(c.dataDir, "sessions"), 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	hookSecret, err := webhookSecret(getenv("AGENTOS_GATEWAY_WEBHOOK_SECRET"), secret, log)
	if err != nil {
		return err
	}
	hooks := webhook.NewClient(c.webhookAllow, hookSecret)
	defer hooks.Close()
	// The outbox's service exists before the services that write events
	// to it; its dispatcher starts with them and stops at shutdown.
	events := notify.New(notify.Config{Node: c.nodeID, RetryFor: c.webhookRetryFor, Log: log.With().Str("component", "webhooks").Logger()}, db, hooks)
	defer closeEvents(log, events)
	g, err := startVMs(ctx, c, log, engine, db, advertise, secret, leave, events)
	if err != nil {
		return err
	}
	keeper := idempotency.New(idempotency.Config{Log: log}, db)
	defer keeper.Close()
	if err := g.startServices(ctx, c, log, db, keeper, hooks); err != nil {
		return err
	}
	return serve(ctx, c, log, ln, g, ready, db.Dialect(), advertise, engine.SidecarBin)
}

// openStore makes the data directory, finds the engine, and opens the
// store with its admin key. The caller closes the store.
func openStore(ctx context.Context, c config, log zerolog.Logger, getenv func(string) string, stderr io.Writer) (sidecarpool.Engine, *store.DB, error) {
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return sidecarpool.Engine{}, nil, fmt.Errorf("data dir: %w", err)
	}
	engine, err := sidecarpool.LocateEngine()
	if err != nil {
		return sidecarpool.Engine{}, nil, err
	}
	db, err := store.Open(ctx, c.storeDSN)
	if err != nil {
		return sidecarpool.Engine{}, nil, fmt.Errorf("store: %w", err)
	}
	if db.Dialect() != "postgres" {
		// A SQLite store has one gateway: every VM it recorded live died
		// with its previous run.
		if n, err := db.MarkLiveVMsLost(ctx, "the gateway restarted"); err != nil {
			db.Close()
			return sidecarpool.Engine{}, nil, fmt.Errorf("store: %w", err)
		} else if n > 0 {
			log.Warn().Int("vms", n).Msg("VMs that were live before the restart are marked lost")
		}
	}
	if err := ensureAdmin(ctx, db, getenv("AGENTOS_GATEWAY_ADMIN_KEY"), stderr); err != nil {
		db.Close()
		return sidecarpool.Engine{}, nil, err
	}
	return engine, db, nil
}

// gatewayServices are the parts of a running gateway that its shutdown
// stops, each in its turn.
type gatewayServices struct {
	events  *notify.Service
	pool    *sidecarpool.Pool
	warm    *warmpool.EnginePool
	vms     *vms.Service
	snaps   *snapshots.Service
	node    *cluster.Node
	watches *watch.Service
	binds   *bindings.Service
	sess    *sessions.Service
	sched   *schedules.Service
	h       *handlers.Server
}

// startVMs starts what runs VMs (the sidecar pool, the warm VMs, the vms
// service with its snapshots and file watches) and joins the cluster. When
// the join fails, what it started is stopped again.
func startVMs(ctx context.Context, c config, log zerolog.Logger, engine sidecarpool.Engine, db *store.DB, advertise, secret string, leave context.CancelCauseFunc,
	events *notify.Service) (*gatewayServices, error) {
	g := &gatewayServices{events: events}
	g.pool = sidecarpool.New(sidecarpool.Config{
		MaxSidecars: c.maxSidecars, VMsPerSidecar: c.vmsPerSidecar, MinIdleSidecars: c.minIdleSidecars,
		IdleTimeout: c.sidecarIdleTimeout, MemoryHighWater: c.memoryHighWater, Placement: c.placement,
		TenantAffinity: c.tenantAffinity,
		Engine:         engine,
		OnExit: func(info sidecarpool.SidecarInfo, err error) {
			log.Error().Err(err).Str("sidecar", info.ID).Int("pid", info.Pid).Msg("sidecar died; its VMs are lost")
		},
	})
	snapBlobs := snapshotBlobs(db, c.dataDir)
	g.warm = warmpool.New(warmpool.Config{Size: c.warmVMs, Options: warmpool.VMOptions{DataDir: filepath.Join(c.dataDir, "sessions")},
		IsolatedIdle: c.sidecarIdleTimeout, Log: log.With().Str("component", "warmpool").Logger()}, vms.PoolOf(g.pool))
	g.vms = vms.New(vms.Config{DataDir: filepath.Join(c.dataDir, "sessions"), OutputBufferBytes: c.outputBufferBytes, Retention: c.vmRetention,
		ExecTimeoutDefault: c.execTimeoutDefault, ExecTimeoutMax: c.execTimeoutMax, Software: engine, NodeID: c.nodeID, Warm: g.warm, Log: log,
		MountAllow: c.mountAllow, Snapshots: snapshots.NewSource(db, snapBlobs),
		Images: snapBlobs, WakeTimeout: c.wakeTimeout, HibernatedRetention: c.hibernatedKeep, OnIdle: c.onIdle, OnShutdown: c.onShutdown,
		CheckpointInterval: c.checkpointEvery, Events: events}, db, vms.PoolOf(g.pool))
	g.snaps = snapshots.New(snapshots.Config{NodeID: c.nodeID, Log: log, Events: events}, db, snapBlobs, g.vms)
	node, lost, err := cluster.Join(ctx, cluster.Config{
		ID: c.nodeID, AdvertiseAddr: advertise, Secret: []byte(secret), Shared: db.Dialect() == "postgres",
		Heartbeat: c.nodeHeartbeat, Timeout: c.nodeTimeout,
		Load:    func() store.NodeLoad { return nodeLoad(g.vms, g.pool, c.maxSidecars*c.vmsPerSidecar) },
		Cordon:  g.vms.Drain,
		LiveVMs: g.vms.LiveCount,
		Leave:   func(reason string) { leave(errors.New(reason)) },
		Log:     log.With().Str("node", c.nodeID).Logger(),
	}, db)
	if err != nil {
		_ = g.warm.Close(context.Background())
		_ = g.vms.Close(context.Background())
		_ = g.pool.Close(context.Background())
		return nil, err
	}
	g.node = node
	if len(lost) > 0 {
		log.Warn().Int("vms", len(lost)).Msg("VMs this node ran before it restarted are marked lost")
	}
	g.watches = watch.New(watch.Config{MaxEntries: c.watchMaxEntries, LogBytes: c.watchLogBytes, Log: log}, watch.FilesOf(g.vms))
	g.vms.ObserveFiles(g.watches)
	return g, nil
}

// startServices starts the services over the VMs (host bindings, agent
// sessions, schedules) and builds the HTTP handler over all of them.
func (g *gatewayServices) startServices(ctx context.Context, c config, log zerolog.Logger, db *store.DB, keeper *idempotency.Keeper, hooks *webhook.Client) error {
	g.binds = bindings.New(bindings.Config{Log: log}, db, g.vms, hooks)
	g.sess = sessions.New(sessions.Config{PermissionDefault: c.permissionDefault, PurgeInterval: c.sessionPurge, Idempotency: keeper, PermissionWebhook: g.binds,
		Events: g.events, Log: log}, db, g.vms)
	g.sched = schedules.New(schedules.Config{Log: log, NodeID: c.nodeID}, db, g.vms, g.sess)
	// Before any request: a new VM gets its bindings; a woken one its
	// bindings and its schedules.
	g.vms.SetUpVMsWith(vms.Setups{g.binds, g.sched})
	if err := g.sched.Start(ctx); err != nil {
		return fmt.Errorf("schedules: %w", err)
	}
	g.h = handlers.New(handlers.Config{MaxBodyBytes: c.maxBodyBytes, MaxFileBytes: c.maxFileBytes, MaxArchiveEntries: c.maxArchiveEntries, MaxPromptBytes: c.maxPromptBytes,
		Previews: previews.New(previews.Config{}, db, g.vms), PreviewDomain: c.previewDomain,
		Heartbeat: c.heartbeat, TokenMaxTTL: c.tokenMaxTTL, AuditRetention: c.auditRetention, NodeID: c.nodeID, AllowedOrigins: c.corsOrigins, BodyReadTimeout: c.bodyReadTimeout, OpenAPI: api.Spec, Console: web.Dist(), Cluster: g.node, Watches: g.watches, Bindings: g.binds, Snapshots: g.snaps, Webhooks: g.events, Log: log}, db, g.vms, g.sess, g.sched, keeper, g.pool)
	g.events.Start()
	return nil
}

// closeEvents stops the webhooks' dispatcher: a delivery it was making
// stays pending, for this node after a restart or another node.
func closeEvents(log zerolog.Logger, events *notify.Service) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := events.Close(ctx); err != nil {
		log.Warn().Err(err).Msg("stopping webhook deliveries")
	}
}

// serve serves HTTP on ln, warming the sidecar pool meanwhile, until the
// server fails or ctx ends; then the gateway shuts down and leaves the
// cluster. dialect, advertise and sidecarBin are logged once listening.
func serve(ctx context.Context, c config, log zerolog.Logger, ln net.Listener, g *gatewayServices, ready chan<- string, dialect, advertise, sidecarBin string) error {
	srv := &http.Server{Handler: g.h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: nil, BaseContext: func(net.Listener) context.Context { return context.Background() }}
	if c.memoryReturn > 0 {
		// The trimmer is stopped, and waited for, when serve returns.
		trimCtx, stopTrim := context.WithCancel(ctx)
		trimmed := make(chan struct{})
		go func() {
			defer close(trimmed)
			memtrim.Run(trimCtx, memtrim.Config{Every: c.memoryReturn, Log: log.With().Str("component", "memtrim").Logger()})
		}()
		defer func() { stopTrim(); <-trimmed }()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(problemlistener.Wrap(ln)) }()
	log.Info().Str("addr", ln.Addr().String()).Str("store", dialect).Str("node", c.nodeID).Str("advertise", advertise).Str("sidecar", sidecarBin).Msg("agentos-gateway listening")

	// Warm the pool in the background: /readyz turns ready once it answered.
	warmCtx, cancelWarm := context.WithCancel(ctx)
	defer cancelWarm()
	warmed := make(chan struct{})
	go func() {
		defer close(warmed)
		if err := g.pool.Warm(warmCtx); err != nil && warmCtx.Err() == nil {
			log.Error().Err(err).Msg("warming the sidecar pool")
		}
	}()
	if ready != nil {
		ready <- ln.Addr().String()
	}

	select {
	case err := <-serveErr:
		cancelWarm()
		<-warmed
		leaveCluster(log, g.node, "its server failed")
		return err
	case <-ctx.Done():
	}
	cancelWarm()
	<-warmed
	reason := "stopped"
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		reason = cause.Error()
	}
	err := shutdown(log, c.shutdownGrace, srv, g)
	leaveCluster(log, g.node, reason)
	return err
}

// webhookSecret is the key the tenants' webhook secrets are derived from:
// the configured one, else one derived from the cluster secret (so that
// every node signs alike), else a random one, which changes at each start.
func webhookSecret(configured, clusterSecret string, log zerolog.Logger) ([]byte, error) {
	switch {
	case configured != "" && len(configured) < 16:
		return nil, errors.New("AGENTOS_GATEWAY_WEBHOOK_SECRET must be at least 16 characters")
	case configured != "":
		return []byte(configured), nil
	case clusterSecret != "":
		m := hmac.New(sha256.New, []byte(clusterSecret))
		m.Write([]byte("agentos-gateway webhook signing"))
		return m.Sum(nil), nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	log.Warn().Msg("AGENTOS_GATEWAY_WEBHOOK_SECRET is not set: the tenants' webhook secrets change at each start")
	return b, nil
}

// leaveCluster records that the node stopped, once its VMs are disposed.
func leaveCluster(log zerolog.Logger, node *cluster.Node, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := node.Close(ctx, reason); err != nil {
		log.Warn().Err(err).Msg("leaving the cluster")
	}
}

// advertiseFrom derives the URL other nodes use from the listen address:
// the host name stands in for an unspecified address (0.0.0.0, [::]).
func advertiseFrom(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// nodeLoad is what the node reports with each heartbeat: its VMs, the VMs
// its sidecars can hold, its sidecars and their resident memory.
func nodeLoad(svc *vms.Service, pool *sidecarpool.Pool, capacity int) store.NodeLoad {
	l := store.NodeLoad{VMs: svc.LiveCount(), Capacity: capacity, Sidecars: pool.Stats().Live}
	for _, sc := range pool.Sidecars() {
		l.RSS += sc.RSS
	}
	return l
}

// shutdown stops accepting, lets in-flight requests finish within the grace
// period, ends streams with a final event, hibernates (--on-shutdown) or
// disposes VMs and stops sidecars.
func shutdown(log zerolog.Logger, grace time.Duration, srv *http.Server, g *gatewayServices) error {
	log.Info().Dur("grace", grace).Msg("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	g.h.DrainStreams()
	if err := <-done; err != nil {
		log.Warn().Err(err).Msg("requests still running at the end of the grace period")
		_ = srv.Close()
	}
	g.h.Close()
	// Each stage has a budget of its own, so that a slow one does not leave
	// the next without time.
	stage := func(name string, budget time.Duration, stop func(context.Context) error) {
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		if err := stop(ctx); err != nil {
			log.Warn().Err(err).Msg(name)
		}
	}
	// Before the VMs: a run in progress is cancelled, not cut by the disposal.
	stage("stopping schedules", 15*time.Second, g.sched.Close)
	stage("stopping file watches", 10*time.Second, g.watches.Close)
	stage("disposing warm VMs", 30*time.Second, g.warm.Close)
	// Hibernating a VM streams its files into the store, a few at once.
	stage("hibernating or disposing VMs", 2*time.Minute, g.vms.Close)
	// After the VMs: their sessions' last events are recorded as they end.
	stage("stopping agent sessions", 15*time.Second, g.sess.Close)
	stage("stopping sidecars", 30*time.Second, g.pool.Close)
	log.Info().Msg("stopped")
	return nil
}

// ensureAdmin makes sure an admin key exists: the one from
// AGENTOS_GATEWAY_ADMIN_KEY, or a new one printed once on first start.
func ensureAdmin(ctx context.Context, db *store.DB, fromEnv string, out io.Writer) error {
	if _, err := db.EnsureTenant(ctx, gateway.Tenant{ID: gateway.DefaultTenantID, Name: "default"}); err != nil {
		return fmt.Errorf("default tenant: %w", err)
	}
	if fromEnv != "" {
		if _, err := db.ImportAPIKey(ctx, gateway.DefaultTenantID, true, fromEnv); err != nil {
			return fmt.Errorf("AGENTOS_GATEWAY_ADMIN_KEY: %w", err)
		}
		return nil
	}
	has, err := db.HasAdminKey(ctx)
	if err != nil || has {
		return err
	}
	_, secret, err := db.CreateAPIKey(ctx, gateway.DefaultTenantID, true)
	if err != nil {
		return fmt.Errorf("admin key: %w", err)
	}
	fmt.Fprintf(out, "\nagentos-gateway admin API key (shown once, store it now):\n\n    %s\n\nUse it as: Authorization: Bearer %s\n\n", secret, secret)
	return nil
}
