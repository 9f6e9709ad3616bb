package handlers

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentos-gateway/agentos-gateway/sessions"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// metrics is the gateway's Prometheus registry. It is per Server, not
// global, so tests can run several servers in one process.
type metrics struct {
	reg            *prometheus.Registry
	httpDuration   *prometheus.HistogramVec
	execDuration   prometheus.Histogram
	sseSubscribers prometheus.Gauge
	// auditInline counts the audit records written on their request's
	// path because the writer's queue was full; auditLost the records the
	// store refused for good (an alert: the trail has a hole).
	auditInline prometheus.Counter
	auditLost   prometheus.Counter
}

func newMetrics(svc *vms.Service, sess *sessions.Service, pool Pool) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "agentos_gateway_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"method", "route", "status"}),
		execDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentos_gateway_exec_duration_seconds", Help: "Duration of exec calls.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		sseSubscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentos_gateway_sse_subscribers", Help: "Open Server-Sent Events streams.",
		}),
		auditInline: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentos_gateway_audit_inline_writes_total", Help: "Audit records written on their request's path because the audit queue was full.",
		}),
		auditLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentos_gateway_audit_records_lost_total", Help: "Audit records the store refused after retries (logged with their request ids).",
		}),
	}
	m.reg.MustRegister(m.httpDuration, m.execDuration, m.sseSubscribers, m.auditInline, m.auditLost,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&poolCollector{pool: pool, svc: svc}, &sessionsCollector{svc: sess}, &warmCollector{pool: pool, svc: svc},
		&usageCollector{svc: svc})
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// poolCollector reads the pool's and the service's state at scrape time.
type poolCollector struct {
	pool Pool
	svc  *vms.Service
}

var (
	descSidecars   = prometheus.NewDesc("agentos_gateway_sidecars", "Live sidecars by state.", []string{"state"}, nil)
	descSidecarRSS = prometheus.NewDesc("agentos_gateway_sidecar_rss_bytes", "Resident memory of each sidecar.", []string{"sidecar"}, nil)
	descVMs        = prometheus.NewDesc("agentos_gateway_vms", "VMs this gateway runs, by state.", []string{"state"}, nil)
	descSpawned    = prometheus.NewDesc("agentos_gateway_sidecar_spawns_total", "Sidecars started.", nil, nil)
	descSpawnFail  = prometheus.NewDesc("agentos_gateway_sidecar_spawn_failures_total", "Sidecar starts that failed.", nil, nil)
	descCrashes    = prometheus.NewDesc("agentos_gateway_sidecar_crashes_total", "Sidecars that died unexpectedly.", nil, nil)
	descRestarts   = prometheus.NewDesc("agentos_gateway_sidecar_restarts_total", "Sidecars started to replace one that crashed.", nil, nil)
	descRetired    = prometheus.NewDesc("agentos_gateway_sidecar_retired_total", "Sidecars stopped for idleness or memory.", nil, nil)
	descShared     = prometheus.NewDesc("agentos_gateway_sidecar_shared_placements_total", "VMs placed on a sidecar holding another tenant's VMs for want of room for one of their own (--tenant-affinity).", nil, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSidecars, descSidecarRSS, descVMs, descSpawned, descSpawnFail, descCrashes, descRestarts, descRetired, descShared} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	byState := map[string]int{}
	for _, sc := range c.pool.Sidecars() {
		byState[sc.State]++
		ch <- prometheus.MustNewConstMetric(descSidecarRSS, prometheus.GaugeValue, float64(sc.RSS), sc.ID)
	}
	for st, n := range byState {
		ch <- prometheus.MustNewConstMetric(descSidecars, prometheus.GaugeValue, float64(n), st)
	}
	for st, n := range c.svc.StateCounts() {
		ch <- prometheus.MustNewConstMetric(descVMs, prometheus.GaugeValue, float64(n), string(st))
	}
	st := c.pool.Stats()
	ch <- prometheus.MustNewConstMetric(descSpawned, prometheus.CounterValue, float64(st.Spawned))
	ch <- prometheus.MustNewConstMetric(descSpawnFail, prometheus.CounterValue, float64(st.SpawnFailures))
	ch <- prometheus.MustNewConstMetric(descCrashes, prometheus.CounterValue, float64(st.Crashes))
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(st.Restarts))
	ch <- prometheus.MustNewConstMetric(descRetired, prometheus.CounterValue, float64(st.Retired))
	ch <- prometheus.MustNewConstMetric(descShared, prometheus.CounterValue, float64(st.SharedPlacements))
}

// sessionsCollector reads the agent sessions' state at scrape time.
type sessionsCollector struct{ svc *sessions.Service }

var (
	descSessions         = prometheus.NewDesc("agentos_gateway_agent_sessions", "Agent sessions of live VMs.", nil, nil)
	descTurns            = prometheus.NewDesc("agentos_gateway_agent_turns_running", "Prompt turns running.", nil, nil)
	descPendingPerms     = prometheus.NewDesc("agentos_gateway_agent_permissions_pending", "Permission requests waiting for an answer.", nil, nil)
	descEventsRecorded   = prometheus.NewDesc("agentos_gateway_session_events_recorded_total", "Durable session events stored.", nil, nil)
	descRecordFailures   = prometheus.NewDesc("agentos_gateway_session_event_store_failures_total", "Durable session events the store refused; they are read back from the engine.", nil, nil)
	descDefaultDecisions = prometheus.NewDesc("agentos_gateway_permission_default_decisions_total", "Permission requests settled by their default decision after the timeout.", nil, nil)
)

func (c *sessionsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descTurns, descPendingPerms, descEventsRecorded, descRecordFailures, descDefaultDecisions} {
		ch <- d
	}
}

func (c *sessionsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.svc == nil {
		return
	}
	st := c.svc.Stats()
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(st.LiveSessions))
	ch <- prometheus.MustNewConstMetric(descTurns, prometheus.GaugeValue, float64(st.RunningTurns))
	ch <- prometheus.MustNewConstMetric(descPendingPerms, prometheus.GaugeValue, float64(st.PendingPermissions))
	ch <- prometheus.MustNewConstMetric(descEventsRecorded, prometheus.CounterValue, float64(st.EventsRecorded))
	ch <- prometheus.MustNewConstMetric(descRecordFailures, prometheus.CounterValue, float64(st.RecordFailures))
	ch <- prometheus.MustNewConstMetric(descDefaultDecisions, prometheus.CounterValue, float64(st.DefaultDecisions))
}
