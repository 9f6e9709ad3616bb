// Package handlers is the HTTP face of the gateway: the REST routes over the
// services, with problem+json errors mapped in one place. Their event
// streams are served by package sse, their WebSocket attachments by package
// attach, and requests for VMs that other nodes run are forwarded by package
// nodeproxy.
//
// An exec's path shows the shape of every call on a VM. The router's
// middleware authenticates the key and, when another live node runs the
// VM, forwards the request there untouched (toOwner); else exec decodes
// the body, and the vms service checks the deadline, looks the VM up and
// checks the cwd, once each (vms.Service.PrepareExec). A buffered exec
// does all of it inside the one idempotency step (idempotent), which claims
// the Idempotency-Key, runs the command and records its outcome. A
// streamed exec prepares first, so that a refusal is a status and not an
// event, then claims the key and streams (execStreamIdempotent).
package handlers

import (
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/attach"
	"github.com/agentos-gateway/agentos-gateway/audit"
	"github.com/agentos-gateway/agentos-gateway/bindings"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
	agentmcp "github.com/agentos-gateway/agentos-gateway/mcp"
	"github.com/agentos-gateway/agentos-gateway/nodeproxy"
	"github.com/agentos-gateway/agentos-gateway/notify"
	"github.com/agentos-gateway/agentos-gateway/previews"
	"github.com/agentos-gateway/agentos-gateway/schedules"
	"github.com/agentos-gateway/agentos-gateway/sessions"
	"github.com/agentos-gateway/agentos-gateway/snapshots"
	"github.com/agentos-gateway/agentos-gateway/sse"
	"github.com/agentos-gateway/agentos-gateway/vms"
	"github.com/agentos-gateway/agentos-gateway/watch"
)

// Store is what the handlers need of the database directly (VMs go through
// the vms service).
type Store interface {
	LookupAPIKey(ctx context.Context, secret string) (gateway.APIKey, gateway.Tenant, error)
	GetTenant(ctx context.Context, id string) (gateway.Tenant, error)
	CreateTenant(ctx context.Context, t gateway.Tenant) (gateway.Tenant, error)
	ListTenants(ctx context.Context, cursor string, limit int) (gateway.Page[gateway.Tenant], error)
	UpdateTenant(ctx context.Context, id string, update func(*gateway.Tenant) error) (gateway.Tenant, error)
	CreateAPIKey(ctx context.Context, tenantID string, admin bool) (gateway.APIKey, string, error)
	ListAPIKeys(ctx context.Context, tenantID string) ([]gateway.APIKey, error)
	DeleteAPIKey(ctx context.Context, tenantID, keyID string) error
	RecordAudit(ctx context.Context, recs ...gateway.AuditRecord) error
	ListAudit(ctx context.Context, f gateway.AuditFilter) (gateway.Page[gateway.AuditRecord], error)
	PurgeAudit(ctx context.Context, before time.Time) (int, error)
	CreateToken(ctx context.Context, t gateway.Token, ttl time.Duration) (gateway.Token, string, error)
	LookupToken(ctx context.Context, secret string) (gateway.Token, gateway.Tenant, error)
	ListTokens(ctx context.Context, tenantID string) ([]gateway.Token, error)
	DeleteToken(ctx context.Context, tenantID, id string) error
	Ping(ctx context.Context) error
}

// Pool is what the handlers show of the sidecar pool.
type Pool interface {
	Sidecars() []gateway.SidecarInfo
	Stats() gateway.SidecarPoolStats
	Ready() bool
}

// Config configures the HTTP layer.
type Config struct {
	// MaxBodyBytes bounds JSON bodies and stdin uploads (default 1 MiB).
	MaxBodyBytes int64
	// MaxFileBytes bounds file uploads and the extracted total of an
	// archive upload (default 1 GiB).
	MaxFileBytes int64
	// MaxArchiveEntries bounds the entries of an archive upload (default
	// 100000).
	MaxArchiveEntries int
	// MaxPromptBytes bounds prompt bodies, which may carry images
	// (default 8 MiB, well inside the engine's 16 MiB frames).
	MaxPromptBytes int64
	// Heartbeat is the SSE heartbeat period (default 15 s).
	Heartbeat time.Duration
	// AllowedOrigins are the origins allowed to call the API from a browser,
	// from --cors-origins ("*" for any); nil allows same-origin only.
	AllowedOrigins []string
	// BodyReadTimeout bounds how long a request body may go without
	// delivering a byte (default 30 s); past it the request is 408.
	BodyReadTimeout time.Duration
	// OpenAPI is the spec served at /v1/openapi.yaml.
	OpenAPI []byte
	// Cluster is the node's membership of the gateways sharing the store:
	// requests for VMs of other nodes are proxied to them (nil: a gateway
	// on its own, without the node routes).
	Cluster Cluster
	// Console is the built web console served at / (web.Dist); nil serves
	// none.
	Console fs.FS
	// TokenMaxTTL bounds the life of the tokens tenants mint (default
	// DefaultTokenMaxTTL).
	TokenMaxTTL time.Duration
	// AuditRetention is how long audit records are kept (0: for good).
	AuditRetention time.Duration
	// NodeID names this node in audit records when Cluster is nil.
	NodeID string
	// Watches serves file watches (nil: the watch route is 503).
	Watches *watch.Service
	// Previews serves preview URLs of VM ports (nil: the preview routes
	// are 503).
	Previews *previews.Service
	// PreviewDomain, from --preview-domain, makes {port}-{vm}.{domain}
	// host-based preview URLs work besides the path-based /p/{token}/.
	PreviewDomain string
	// Bindings serves the VMs' host bindings (nil: their routes are 503).
	Bindings *bindings.Service
	// Snapshots serves snapshots and forks (nil: their routes are 503).
	Snapshots *snapshots.Service
	// Webhooks serves event subscriptions and their deliveries, and takes
	// the exec.done events of idempotent execs (nil: their routes are 503).
	Webhooks *notify.Service
	Log      zerolog.Logger
}

// Server is the gateway's HTTP handler.
type Server struct {
	cfg      Config
	vms      *vms.Service
	sessions *sessions.Service
	// schedules runs the VMs' cron schedules.
	schedules *schedules.Service
	store     Store
	keeper    *idempotency.Keeper
	pool      Pool
	log       zerolog.Logger
	router    chi.Router
	sse       *sse.Hub
	attach    *attach.Hub
	metrics   *metrics
	limiter   limiter
	// nodes carries the requests proxied to other nodes.
	nodes   *nodeproxy.Proxy
	console *consoleFiles
	// audit stores the audit records off the requests' path (nil without
	// a store).
	audit *audit.Writer
	// auditStop ends the audit purge, which auditDone says has returned.
	auditStop chan struct{}
	auditDone chan struct{}
}

// New builds the router. Its arguments come in the order of every service
// constructor: the configuration, the store, then the services. keeper runs
// the idempotent requests (exec and spawn with an Idempotency-Key); sched
// serves the VMs' schedules.
func New(cfg Config, st Store, svc *vms.Service, sess *sessions.Service, sched *schedules.Service, keeper *idempotency.Keeper, pool Pool) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = 1 << 30
	}
	if cfg.MaxArchiveEntries <= 0 {
		cfg.MaxArchiveEntries = 100000
	}
	if cfg.MaxPromptBytes <= 0 {
		cfg.MaxPromptBytes = 8 << 20
	}
	if cfg.TokenMaxTTL <= 0 {
		cfg.TokenMaxTTL = DefaultTokenMaxTTL
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = 30 * time.Second
	}
	s := &Server{cfg: cfg, vms: svc, sessions: sess, schedules: sched, store: st, keeper: keeper, pool: pool, log: cfg.Log}
	s.metrics = newMetrics(svc, sess, pool)
	console, err := loadConsole(cfg.Console)
	if err != nil {
		// The console is embedded in the binary: a file that cannot be read
		// is a broken build, and the API still works without it.
		cfg.Log.Error().Err(err).Msg("the web console is not served")
		console, _ = loadConsole(nil)
	}
	s.console = console
	s.sse = sse.NewHub(sse.Config{Heartbeat: cfg.Heartbeat, OnCount: func(d int) { s.metrics.sseSubscribers.Add(float64(d)) }, Refuse: writeError, Log: cfg.Log})
	s.attach = attach.NewHub(attach.Config{Heartbeat: cfg.Heartbeat, AllowedOrigins: cfg.AllowedOrigins, MaxInput: vms.MaxStdinWrite,
		Draining: s.sse.Draining(), Refuse: writeError})
	s.nodes = nodeproxy.New(nodeproxy.Config{Cluster: cfg.Cluster, Conns: s.attach, IsUpgrade: attach.IsUpgrade,
		Draining: s.sse.Draining(), Refuse: writeError, RequestID: requestID})
	s.router = s.routes()
	if st != nil {
		s.audit = audit.New(st, audit.Config{Log: cfg.Log,
			OnInline: s.metrics.auditInline.Inc, OnLost: func(n int) { s.metrics.auditLost.Add(float64(n)) }})
	}
	s.auditStop, s.auditDone = make(chan struct{}), make(chan struct{})
	if st != nil && cfg.AuditRetention > 0 {
		go func() {
			defer close(s.auditDone)
			s.purgeAudit(s.auditStop)
		}()
	} else {
		close(s.auditDone)
	}
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// DrainStreams ends every open event stream with a final event; call it when
// shutdown begins so that streaming handlers return.
func (s *Server) DrainStreams() { s.sse.Drain() }

// Close ends the SSE machinery and waits for the WebSocket connections,
// which the HTTP server does not track, to end; call it after the HTTP
// server stopped and DrainStreams.
func (s *Server) Close() {
	s.sse.Drain()
	s.attach.Close()
	s.sse.Close()
	s.nodes.Close()
	select {
	case <-s.auditStop:
	default:
		close(s.auditStop)
	}
	<-s.auditDone
	if s.audit != nil {
		ctx, cancel := context.WithTimeout(context.Background(), auditWriteTimeout)
		if err := s.audit.Close(ctx); err != nil {
			s.log.Error().Err(err).Msg("close the audit writer")
		}
		cancel()
	}
}

// Router exposes the chi router, for the test that compares it with the
// OpenAPI spec.
func (s *Server) Router() chi.Router { return s.router }

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.withRequestID, s.traces, s.observe, s.cors(), s.bodyReadTimeout, s.nodeHeader, s.previewHost)
	r.NotFound(s.consoleFallback)

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Method(http.MethodGet, "/metrics", s.metrics.handler())
	r.Get("/v1/openapi.yaml", s.openapi)
	r.Get("/", s.consoleIndex)
	r.Get("/assets/{asset}", s.consoleAsset)
	s.previewPathRoutes(r)
	// The MCP tools call the routes below through the router itself, with
	// the caller's credential (package agentmcp): authenticate here only
	// answers a request without one, as /v1 would, before the protocol.
	// The SDK's warnings and errors of the transport go to the gateway's
	// log; below them it speaks of every request, which the request log
	// already does.
	mcpLog := slog.New(zerolog.NewSlogHandler(s.log.Level(max(s.log.GetLevel(), zerolog.WarnLevel)).With().Str("component", "mcp").Logger()))
	r.With(s.authenticate).Method(http.MethodPost, "/mcp", mcpResponses(agentmcp.NewHandler(http.HandlerFunc(s.ServeHTTP),
		agentmcp.HandlerOptions{Logger: mcpLog}), s.cfg.Heartbeat))

	r.Route("/v1", func(r chi.Router) {
		r.Use(s.authenticate, s.authorizeToken, s.refuseUnknownQuery)
		r.Get("/me", s.me)
		r.Post("/tokens", s.createToken)
		r.Get("/tokens", s.listTokens)
		r.Delete("/tokens/{token}", s.deleteToken)
		r.Get("/audit", s.listAudit)
		r.Post("/webhooks", s.createWebhook)
		r.Get("/webhooks", s.listWebhooks)
		r.Get("/webhooks/{webhook}", s.getWebhook)
		r.Patch("/webhooks/{webhook}", s.updateWebhook)
		r.Delete("/webhooks/{webhook}", s.deleteWebhook)
		r.Get("/webhooks/{webhook}/deliveries", s.listDeliveries)
		r.Post("/webhooks/{webhook}/deliveries/{delivery}/redeliver", s.redeliver)
		r.Get("/webhook-secret", s.webhookSecret)
		r.With(s.placeCreate).Post("/vms", s.createVM)
		r.Get("/vms", s.listVMs)
		r.Route("/vms/{vm}", func(r chi.Router) {
			r.Use(s.toOwner)
			r.Get("/", s.getVM)
			r.Delete("/", s.deleteVM)
			r.Patch("/", s.updateVM)
			r.Post("/hibernate", s.hibernateVM)
			r.Post("/wake", s.wakeVM)
			r.Post("/checkpoint", s.checkpointVM)
			r.Get("/usage", s.vmUsage)
			r.Get("/events", s.vmEvents)
			r.Post("/exec", s.exec)
			r.Get("/exec/{key}", s.execOutcome)
			r.Post("/processes", s.spawn)
			r.Get("/processes", s.listProcesses)
			r.Get("/processes/{pid}", s.getProcess)
			r.Get("/processes/{pid}/output", s.processOutput)
			r.Post("/processes/{pid}/stdin", s.processStdin)
			r.Post("/processes/{pid}/stdin/close", s.processCloseStdin)
			r.Post("/processes/{pid}/signal", s.processSignal)
			r.Get("/processes/{pid}/wait", s.processWait)
			r.Get("/processes/{pid}/attach", s.attachProcess)
			r.Post("/shells", s.openShell)
			r.Get("/shells", s.listShells)
			r.Get("/shells/{shell}", s.getShell)
			r.Get("/shells/{shell}/attach", s.attachShell)
			r.Post("/shells/{shell}/input", s.shellInput)
			r.Post("/shells/{shell}/resize", s.shellResize)
			r.Get("/shells/{shell}/output", s.shellOutput)
			r.Delete("/shells/{shell}", s.closeShell)
			r.Get("/files", s.readFile)
			r.Head("/files", s.statFileHead)
			r.Put("/files", s.writeFile)
			r.Delete("/files", s.deleteFile)
			r.Get("/archive", s.readArchive)
			r.Put("/archive", s.writeArchive)
			r.Get("/dirs", s.listDir)
			r.Post("/dirs", s.mkdir)
			r.Post("/fs/move", s.move)
			r.Get("/fs/stat", s.stat)
			r.Get("/watch", s.watchFiles)
			r.Post("/snapshots", s.createSnapshot)
			r.Post("/fork", s.forkVM)
			r.Get("/agents", s.listAgents)
			s.portRoutes(r)
			s.previewRoutes(r)
			r.Get("/mounts", s.listMounts)
			r.Post("/mounts", s.createMount)
			r.Delete("/mounts", s.deleteMount)
			r.Get("/software", s.listSoftware)
			r.Post("/software", s.linkSoftware)
			r.Get("/bindings", s.getBindings)
			r.Put("/bindings", s.putBindings)
			r.Post("/schedules", s.createSchedule)
			r.Get("/schedules", s.listSchedules)
			r.Get("/schedules/{schedule}", s.getSchedule)
			r.Delete("/schedules/{schedule}", s.deleteSchedule)
			r.Get("/schedules/{schedule}/runs", s.listScheduleRuns)
			r.Post("/sessions", s.openSession)
			r.Get("/sessions", s.listSessions)
			r.Route("/sessions/{session}", func(r chi.Router) {
				r.Get("/", s.getSession)
				r.Delete("/", s.deleteSession)
				r.Post("/unload", s.unloadSession)
				r.Post("/prompt", s.prompt)
				r.Post("/cancel", s.cancelPrompt)
				r.Get("/permissions", s.listPermissions)
				r.Post("/permissions/{request}", s.answerPermission)
				r.Get("/config", s.getSessionConfig)
				r.Put("/config/{config}", s.setSessionConfig)
				r.Get("/capabilities", s.sessionCapabilities)
				r.Get("/agent-info", s.sessionAgentInfo)
				r.Get("/history", s.sessionHistory)
				r.Get("/events", s.sessionEvents)
			})
		})
		r.Get("/snapshots", s.listSnapshots)
		r.Get("/snapshots/{snapshot}", s.getSnapshot)
		r.Delete("/snapshots/{snapshot}", s.deleteSnapshot)
		r.Group(func(r chi.Router) {
			r.Use(adminOnly)
			r.Post("/tenants", s.createTenant)
			r.Get("/tenants", s.listTenants)
			r.Get("/tenants/{tenant}", s.getTenant)
			r.Patch("/tenants/{tenant}", s.updateTenant)
			r.Post("/tenants/{tenant}/keys", s.createKey)
			r.Get("/tenants/{tenant}/keys", s.listKeys)
			r.Delete("/tenants/{tenant}/keys/{key}", s.deleteKey)
			r.Get("/sidecars", s.listSidecars)
			r.Get("/nodes", s.listNodes)
			r.Post("/nodes/{node}/drain", s.drainNode)
		})
	})
	return r
}

// routeMethods are the methods a route may have, in the order Allow lists
// them.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// methodNotAllowed turns chi's own 405, which carries the Allow header chi
// computed while routing (a custom chi handler is not given the methods),
// into a problem document.
func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range routeMethods {
		if slices.Contains(w.Header().Values("Allow"), m) {
			allowed = append(allowed, m)
		}
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeError(w, r, gateway.Errorf(gateway.CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allowed, ", ")).
		WithDetail("allow", allowed))
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if err := s.store.Ping(r.Context()); err != nil {
		writeError(w, r, gateway.Wrap(gateway.CodeUnavailable, err, "the store does not answer"))
		return
	}
	if !s.pool.Ready() {
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "no sidecar has answered yet"))
		return
	}
	if s.vms.Cordoned() {
		// A load balancer stops sending it new work; what it still runs is
		// reached through the other nodes.
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "this node is draining"))
		return
	}
	writeJSON(w, http.StatusOK, api.Ready{Status: "ready"})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(s.cfg.OpenAPI)
}
