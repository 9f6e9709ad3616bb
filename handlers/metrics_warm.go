package handlers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentos-gateway/agentos-gateway/vms"
)

// warmCollector reads the warm VMs' counters and the placement of VMs on
// sidecars at scrape time.
type warmCollector struct {
	pool Pool
	svc  *vms.Service
}

var (
	descWarmReady     = prometheus.NewDesc("agentos_gateway_warm_vms", "Warm VMs ready to be taken, over every isolation class.", nil, nil)
	descWarmTarget    = prometheus.NewDesc("agentos_gateway_warm_vm_target", "Warm VMs the pool aims to hold now, over every isolation class.", nil, nil)
	descWarmHits      = prometheus.NewDesc("agentos_gateway_warm_vm_hits_total", "VM creates served by a warm VM.", nil, nil)
	descWarmMisses    = prometheus.NewDesc("agentos_gateway_warm_vm_misses_total", "VM creates no warm VM could serve (none ready, or a spec only a new VM honours).", nil, nil)
	descWarmRefill    = prometheus.NewDesc("agentos_gateway_warm_vm_refill_seconds", "Time to create and warm up one warm VM.", nil, nil)
	descWarmRefillErr = prometheus.NewDesc("agentos_gateway_warm_vm_refill_failures_total", "Warm VM refills that failed.", nil, nil)
	descWarmDiscarded = prometheus.NewDesc("agentos_gateway_warm_vm_discarded_total", "Warm VMs disposed untaken (their sidecar drained or died, their isolated tenant went idle, or a create needed the room).", nil, nil)
	descSidecarVMs    = prometheus.NewDesc("agentos_gateway_sidecar_vms", "VMs placed on each sidecar, warm VMs included.", []string{"sidecar"}, nil)
)

func (c *warmCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descWarmReady, descWarmTarget, descWarmHits, descWarmMisses, descWarmRefill, descWarmRefillErr, descWarmDiscarded, descSidecarVMs} {
		ch <- d
	}
}

func (c *warmCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.svc.WarmStats()
	ch <- prometheus.MustNewConstMetric(descWarmReady, prometheus.GaugeValue, float64(st.Ready))
	ch <- prometheus.MustNewConstMetric(descWarmTarget, prometheus.GaugeValue, float64(st.Target))
	ch <- prometheus.MustNewConstMetric(descWarmHits, prometheus.CounterValue, float64(st.Hits))
	ch <- prometheus.MustNewConstMetric(descWarmMisses, prometheus.CounterValue, float64(st.Misses))
	ch <- prometheus.MustNewConstSummary(descWarmRefill, st.Refills, st.RefillSeconds, nil)
	ch <- prometheus.MustNewConstMetric(descWarmRefillErr, prometheus.CounterValue, float64(st.RefillFailures))
	ch <- prometheus.MustNewConstMetric(descWarmDiscarded, prometheus.CounterValue, float64(st.Discarded))
	for _, sc := range c.pool.Sidecars() {
		ch <- prometheus.MustNewConstMetric(descSidecarVMs, prometheus.GaugeValue, float64(sc.Holds), sc.ID)
	}
}
