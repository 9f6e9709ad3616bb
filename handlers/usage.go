package handlers

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/metering"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// vmUsage answers a VM's usage (vms.Service.Usage): 200 with its figures, a
// hibernated VM's without waking it.
func (s *Server) vmUsage(w http.ResponseWriter, r *http.Request) {
	u, err := s.vms.Usage(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "vm"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, usageResource(u))
}

// usageResource is a VM's usage as the API shows it.
func usageResource(u metering.Usage) api.VMUsage {
	out := api.VMUsage{
		VMID: u.VMID, State: u.State, CollectedAt: u.CollectedAt.UTC(), OwnSidecar: u.OwnSidecar,
		MemoryBytes: u.MemoryBytes, FilesystemBytes: u.FilesystemBytes, Inodes: u.Inodes, ImageBytes: u.ImageBytes,
	}
	if u.CPU != nil {
		secs := u.CPU.Seconds()
		out.CPUSeconds = &secs
	}
	if e := u.Engine; e != nil {
		out.Processes = &api.UsageProcesses{Running: e.RunningProcesses, Exited: e.ExitedProcesses}
		out.Handles = &api.UsageHandles{OpenFDs: e.OpenFDs, Pipes: e.Pipes, PTYs: e.PTYs, Sockets: e.Sockets,
			SocketListeners: e.SocketListeners, SocketConnections: e.SocketConnections}
		out.Limits = &api.UsageLimits{Processes: e.ProcessLimit, OpenFDs: e.OpenFDLimit, Pipes: e.PipeLimit, PTYs: e.PTYLimit,
			Sockets: e.SocketLimit, FilesystemBytes: e.FilesystemBytesLimit, Inodes: e.InodeLimit}
	}
	return out
}

// usageCollector exports the tenants' usage as the vms service's metrics
// pass last measured it (every 10 s): a scrape makes no engine call. The
// tenant label is bounded: the first metering.MaxTenants tenants measured
// have their own, for the gateway's life, and the rest share
// metering.OtherTenants. There is no per-VM label, VM ids being unbounded; GET
// /v1/vms/{vm}/usage has a VM's figures.
type usageCollector struct{ svc *vms.Service }

var (
	descTenantVMs     = prometheus.NewDesc("agentos_gateway_tenant_vms", "Live VMs of each tenant on this node, at the last usage pass.", []string{"tenant"}, nil)
	descTenantMemory  = prometheus.NewDesc("agentos_gateway_tenant_memory_bytes", "Resident memory of the sidecars running only the tenant's VMs (VMs on sidecars shared between tenants are not counted).", []string{"tenant"}, nil)
	descTenantCPU     = prometheus.NewDesc("agentos_gateway_tenant_cpu_seconds_total", "CPU time of the sidecars while they ran only the tenant's VMs, sampled every usage pass.", []string{"tenant"}, nil)
	descTenantFS      = prometheus.NewDesc("agentos_gateway_tenant_filesystem_bytes", "Filesystem bytes of the tenant's VMs, as the engine accounts them for maxFilesystemBytes.", []string{"tenant"}, nil)
	descTenantProcs   = prometheus.NewDesc("agentos_gateway_tenant_processes", "Running guest processes of the tenant's VMs.", []string{"tenant"}, nil)
	descUsagePassTime = prometheus.NewDesc("agentos_gateway_usage_pass_seconds", "How long the last usage pass over every live VM took.", nil, nil)
)

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTenantVMs, descTenantMemory, descTenantCPU, descTenantFS, descTenantProcs, descUsagePassTime} {
		ch <- d
	}
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	if c.svc == nil {
		return
	}
	tenants, pass := c.svc.TenantUsage()
	for _, t := range tenants {
		ch <- prometheus.MustNewConstMetric(descTenantVMs, prometheus.GaugeValue, float64(t.VMs), t.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantMemory, prometheus.GaugeValue, float64(t.MemoryBytes), t.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantCPU, prometheus.CounterValue, t.CPU.Seconds(), t.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantFS, prometheus.GaugeValue, float64(t.FilesystemBytes), t.Tenant)
		ch <- prometheus.MustNewConstMetric(descTenantProcs, prometheus.GaugeValue, float64(t.Processes), t.Tenant)
	}
	ch <- prometheus.MustNewConstMetric(descUsagePassTime, prometheus.GaugeValue, pass.Seconds())
}
