// Package metering accounts for the live VMs' use of their node: each VM's
// figures (Usage), collected at most once per TTL whoever asks, and the
// tenants' shares of the node for the metrics (TenantUsage). It keeps the
// accounting and its math; the service that runs the VMs (vms) hands it
// the VMs and what it knows of them through VM and Node.
//
// A VM's usage comes from two places, the only ones the pinned engine
// (0.2.21) offers (agentos.ProcessUsage says what was measured and ruled
// out):
//   - the engine's resource snapshot of the VM, one call (0.1 ms measured
//     on an idle sidecar, up to 13 ms on a busy one): guest processes,
//     descriptors, pipes, ptys, sockets, the filesystem's bytes and
//     inodes, and the limits each is checked against. The filesystem
//     figures are the engine's own account, the one maxFilesystemBytes is
//     checked with, which it recounts whenever a file is written: a write
//     shows at once, a delete only at the next write, and a VM that never
//     had a file written has no count yet. A guest find summing sizes
//     would be exact but costs 0.3 to 3 s of the guest's time per VM, and
//     a stat per file from the host 10 ms each; neither is affordable on
//     every read.
//   - the host's /proc of the VM's sidecar process (two file reads, about
//     70 µs): its resident memory and CPU time, which are the VM's only
//     when no other tenant VM runs on that sidecar (warm VMs waiting there
//     are not tenants' VMs: idle, each costs about 5 MiB and no CPU).
//
// Reads are cached for TTL and a VM has at most one collection in flight,
// so any number of readers costs one engine call per VM per TTL. The
// service runs a metrics pass (Meter.Pass) every Interval, for the
// per-tenant figures of /metrics (Meter.Tenants).
package metering

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

const (
	// TTL is how long a VM's figures are served before they are collected
	// again.
	TTL = 2 * time.Second
	// Interval is how often every live VM is collected for metrics.
	Interval = 10 * time.Second
	// collectTimeout bounds one VM's collection: the engine call waits
	// behind whatever else its sidecar is doing.
	collectTimeout = 5 * time.Second
	// passParallel bounds the collections of one metrics pass at once.
	passParallel = 4
	// MaxTenants bounds the tenant label of the usage metrics: the first
	// tenants measured get a label of their own, kept for the meter's life
	// so that counters stay monotonic; the others are summed under
	// OtherTenants.
	MaxTenants = 50
	// OtherTenants is the label of the tenants past MaxTenants. Tenant ids
	// are "ten_" and hex digits (or a name an admin chose, which the
	// leading underscore keeps apart from in practice).
	OtherTenants = "_other"
)

// Usage is what the gateway can tell of a VM's use of its node. Figures the
// engine cannot give are nil rather than guessed.
type Usage struct {
	VMID        string
	State       gateway.VMState
	CollectedAt time.Time
	// OwnSidecar: no other tenant VM runs on the VM's sidecar process, so
	// that process's memory and CPU time are the VM's (with the engine's
	// own, about 20 MiB, and what the process kept from VMs it ran before).
	OwnSidecar bool
	// MemoryBytes is the sidecar's resident memory, when OwnSidecar.
	MemoryBytes *int64
	// CPU is the sidecar's CPU time over the stretches the VM had it to
	// itself, sampled at each collection; nil until there was one.
	CPU *time.Duration
	// FilesystemBytes and Inodes are the engine's account of the VM's
	// filesystem; nil until the engine counted (its first file write).
	FilesystemBytes, Inodes *uint64
	// ImageBytes is a hibernated VM's stored image size.
	ImageBytes *int64
	// Engine is the engine's resource snapshot; nil for a hibernated VM.
	Engine *EngineCounts
}

// EngineCounts are the counts of a VM's resource snapshot (the engine's
// GetResourceSnapshotRequest) and the limits they are checked against (0:
// the engine reports none).
type EngineCounts struct {
	RunningProcesses, ExitedProcesses                                 uint64
	OpenFDs, Pipes, PTYs, Sockets, SocketListeners, SocketConnections uint64
	ProcessLimit, OpenFDLimit, PipeLimit, PTYLimit                    uint64
	SocketLimit, FilesystemBytesLimit, InodeLimit                     uint64
}

// TenantUsage is one tenant's share of the node, as the last metrics pass
// measured it. Tenant is the tenant's id, or OtherTenants.
type TenantUsage struct {
	Tenant string
	// VMs are the tenant's live VMs on this node.
	VMs int
	// MemoryBytes sums the resident memory of the sidecars whose live VMs
	// are all the tenant's.
	MemoryBytes int64
	// CPU is the CPU time of those sidecars while they were the tenant's
	// alone, since the meter started: a counter.
	CPU time.Duration
	// FilesystemBytes and Processes sum the engine's figures of the
	// tenant's VMs.
	FilesystemBytes uint64
	Processes       uint64
}

// VM is a live VM as the meter sees it. The meter keeps a VM's figures by
// this value, so its owner hands the same one (a pointer) for the VM's
// life, and a new one when the VM goes live again (a wake): that one's CPU
// account starts afresh, on whatever sidecar it runs on now.
type VM interface {
	ID() string
	Tenant() string
	// Sidecar is the sidecar process the VM runs on.
	Sidecar() *agentos.Sidecar
	// Resources is the engine's resource snapshot of the VM; its error is
	// the owner's to word (a *gateway.Error).
	Resources(ctx context.Context) (protocol.ResourceSnapshotResponse, error)
	// State is ready or hibernating; ended once the VM is gone, when the
	// next pass drops its figures.
	State() (state gateway.VMState, ended bool)
}

// Node is the meter's view of the service that runs the VMs.
type Node interface {
	// Now is the service's clock.
	Now() time.Time
	// Live lists the VMs running on this node.
	Live() []VM
	// Alone reports whether no other tenant VM (a VM of Live) runs on vm's
	// sidecar.
	Alone(vm VM) bool
}

// Meter is the usage bookkeeping of one service; its zero value is ready.
// Its mu is taken after the service's own locks, never before, and never
// across an engine call.
type Meter struct {
	// Log gets what a collection could not read.
	Log zerolog.Logger

	mu  sync.Mutex
	vms map[VM]*vmUsage
	// sidecars are the metrics pass's last sample of each sidecar.
	sidecars map[*agentos.Sidecar]sidecarSample
	// labels are the tenants with a metric label of their own, given for
	// good; cpu the CPU counters by label.
	labels  map[string]bool
	cpu     map[string]time.Duration
	tenants []TenantUsage
	// pass is how long the last metrics pass took.
	pass time.Duration
}

// vmUsage is a VM's cached figures and CPU account.
type vmUsage struct {
	last Usage
	at   time.Time
	// flight is closed when the collection in progress ends; nil when none
	// is.
	flight chan struct{}
	// sample is the sidecar's CPU time at the last collection, and own
	// whether the VM had the sidecar to itself then; sampled says there
	// was one.
	sample  time.Duration
	own     bool
	sampled bool
	// cpu is the CPU time of the stretches the VM had the sidecar to
	// itself at both ends; counted once there was one.
	cpu     time.Duration
	counted bool
}

// sidecarSample is a sidecar's CPU time at a metrics pass and the tenant
// whose VMs alone it ran then ("" for several, or none).
type sidecarSample struct {
	cpu    time.Duration
	tenant string
}

// Usage returns vm's figures, at most TTL old.
func (m *Meter) Usage(ctx context.Context, node Node, vm VM) (Usage, error) {
	return m.get(ctx, vm, node.Now, func(ctx context.Context) (Usage, error) { return m.collect(ctx, node, vm) })
}

// get returns vm's cached figures while fresh, else joins the collection in
// flight or runs collect itself: one collection per VM at a time, whoever
// asks. A failed collection is not cached; the next caller runs another.
func (m *Meter) get(ctx context.Context, vm VM, now func() time.Time, collect func(context.Context) (Usage, error)) (Usage, error) {
	for {
		m.mu.Lock()
		st := m.vmLocked(vm)
		if !st.at.IsZero() && now().Sub(st.at) < TTL {
			out := st.last
			m.mu.Unlock()
			return out, nil
		}
		if ch := st.flight; ch != nil {
			m.mu.Unlock()
			select {
			case <-ch:
				// Served from the cache on the next turn, or collected
				// again if that collection failed.
				continue
			case <-ctx.Done():
				return Usage{}, gateway.Wrap(gateway.CodeDeadlineExceeded, ctx.Err(), "usage: the request ended while the VM's usage was being collected")
			}
		}
		ch := make(chan struct{})
		st.flight = ch
		m.mu.Unlock()
		out, err := collect(ctx)
		m.mu.Lock()
		st.flight = nil
		if err == nil {
			st.last, st.at = out, now()
		}
		m.mu.Unlock()
		close(ch)
		return out, err
	}
}

// vmLocked returns vm's usage record, made on first use. m.mu must be held.
func (m *Meter) vmLocked(vm VM) *vmUsage {
	if m.vms == nil {
		m.vms = map[VM]*vmUsage{}
	}
	st := m.vms[vm]
	if st == nil {
		st = &vmUsage{}
		m.vms[vm] = st
	}
	return st
}

// collect asks the engine for vm's resource snapshot and the host for its
// sidecar's memory and CPU time.
func (m *Meter) collect(ctx context.Context, node Node, vm VM) (Usage, error) {
	ctx, cancel := context.WithTimeout(ctx, collectTimeout)
	defer cancel()
	snap, err := vm.Resources(ctx)
	if err != nil {
		return Usage{}, err
	}
	state, _ := vm.State()
	out := Usage{VMID: vm.ID(), State: state, CollectedAt: node.Now().UTC(), Engine: engineCounts(snap)}
	out.FilesystemBytes, out.Inodes = counted(snap, "vm_filesystem_bytes"), counted(snap, "vm_inodes")

	own := node.Alone(vm)
	out.OwnSidecar = own
	host, err := vm.Sidecar().Usage()
	if err != nil {
		// The sidecar died meanwhile: the engine's figures stand, the
		// host's are unknown.
		m.Log.Debug().Err(err).Str("vm", vm.ID()).Msg("usage: read the sidecar's /proc")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.vmLocked(vm)
	if err == nil {
		st.account(host.CPU, own)
		if own {
			out.MemoryBytes = &host.RSS
		}
	}
	if st.counted {
		cpu := st.cpu
		out.CPU = &cpu
	}
	return out, nil
}

// Begin takes a VM's first CPU sample as it goes live, so that its CPU time
// counts from its start; own says whether it has its sidecar to itself.
func (m *Meter) Begin(vm VM, own bool) {
	host, err := vm.Sidecar().Usage()
	if err != nil {
		return
	}
	m.mu.Lock()
	m.vmLocked(vm).account(host.CPU, own)
	m.mu.Unlock()
}

// account adds the CPU time since the last sample when the VM had the
// sidecar to itself at both, and takes cpu as the new sample.
func (st *vmUsage) account(cpu time.Duration, own bool) {
	if st.sampled && st.own && own {
		// A sidecar's CPU time never goes back; max guards a misread.
		st.cpu += max(cpu-st.sample, 0)
		st.counted = true
	}
	st.sample, st.own, st.sampled = cpu, own, true
}

// engineCounts reads a resource snapshot's counts and limits.
func engineCounts(r protocol.ResourceSnapshotResponse) *EngineCounts {
	limit := func(name string) uint64 {
		if e, ok := snapshotEntry(r, name); ok {
			return e.Capacity
		}
		return 0
	}
	return &EngineCounts{
		RunningProcesses: r.RunningProcesses, ExitedProcesses: r.ExitedProcesses,
		OpenFDs: r.OpenFds, Pipes: r.Pipes, PTYs: r.Ptys, Sockets: r.Sockets, SocketListeners: r.SocketListeners, SocketConnections: r.SocketConnections,
		ProcessLimit: limit("vm_processes"), OpenFDLimit: limit("vm_open_fds"), PipeLimit: limit("vm_pipes"), PTYLimit: limit("vm_ptys"),
		SocketLimit: limit("vm_sockets"), FilesystemBytesLimit: limit("vm_filesystem_bytes"), InodeLimit: limit("vm_inodes"),
	}
}

// counted returns a resource of the snapshot that the engine has counted:
// nil while both its level and its high-water mark are 0, which is how a
// VM's filesystem figures stay until the engine first recounts them (at a
// file write; even the base image holds about 185 KB in 375 inodes).
func counted(r protocol.ResourceSnapshotResponse, name string) *uint64 {
	e, ok := snapshotEntry(r, name)
	if !ok || (e.Depth == 0 && e.HighWater == 0) {
		return nil
	}
	v := e.Depth
	return &v
}

func snapshotEntry(r protocol.ResourceSnapshotResponse, name string) (protocol.QueueSnapshotEntry, bool) {
	for _, e := range r.QueueSnapshots {
		if e.Name == name && e.Category == "resource" {
			return e, true
		}
	}
	return protocol.QueueSnapshotEntry{}, false
}

// Tenants returns the per-tenant figures of the last metrics pass, by
// label, and how long that pass took. Every label given out is listed, with
// zeros once its tenant has no VM here, so that its CPU counter stays.
func (m *Meter) Tenants() ([]TenantUsage, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.tenants), m.pass
}

// Pass is the metrics pass: it collects every live VM of node (served from
// the cache when a read just did), passParallel at once, then samples each
// sidecar for the tenants' memory and CPU time, and forgets the VMs that
// ended.
func (m *Meter) Pass(ctx context.Context, node Node) {
	start := time.Now()
	vms := node.Live()
	got := make([]*Usage, len(vms))
	var wg sync.WaitGroup
	sem := make(chan struct{}, passParallel)
	for i, vm := range vms {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			u, err := m.Usage(ctx, node, vm)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, agentos.ErrVMDisposed) {
					m.Log.Debug().Err(err).Str("vm", vm.ID()).Msg("usage")
				}
				return
			}
			got[i] = &u
		})
	}
	wg.Wait()

	// Which tenant each sidecar runs VMs of alone.
	tenantOf := map[*agentos.Sidecar]string{}
	for _, vm := range vms {
		sc := vm.Sidecar()
		if t, seen := tenantOf[sc]; seen && t != vm.Tenant() {
			tenantOf[sc] = ""
		} else if !seen {
			tenantOf[sc] = vm.Tenant()
		}
	}
	samples := make(map[*agentos.Sidecar]agentos.ProcessUsage, len(tenantOf))
	for sc := range tenantOf {
		if pu, err := sc.Usage(); err == nil {
			samples[sc] = pu
		}
	}

	rows := make([]tallyVM, len(vms))
	for i, vm := range vms {
		rows[i] = tallyVM{tenant: vm.Tenant(), usage: got[i]}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tallyLocked(rows, tenantOf, samples)
	for vm := range m.vms {
		if _, ended := vm.State(); ended {
			delete(m.vms, vm)
		}
	}
	m.pass = time.Since(start)
}

// tallyVM is a live VM as a metrics pass saw it: usage is nil when its
// collection failed.
type tallyVM struct {
	tenant string
	usage  *Usage
}

// tallyLocked sums a metrics pass by tenant label into m.tenants: the VMs'
// engine figures, and the memory and CPU time of each sidecar that ran one
// tenant's VMs alone (tenantOf; "" for several), whose CPU time since the
// last pass counts when it was that tenant's then too. m.mu must be held.
func (m *Meter) tallyLocked(vms []tallyVM, tenantOf map[*agentos.Sidecar]string, samples map[*agentos.Sidecar]agentos.ProcessUsage) {
	by := map[string]*TenantUsage{}
	row := func(tenant string) *TenantUsage {
		label := m.labelLocked(tenant)
		if by[label] == nil {
			by[label] = &TenantUsage{Tenant: label}
		}
		return by[label]
	}
	for _, v := range vms {
		r := row(v.tenant)
		r.VMs++
		if g := v.usage; g != nil && g.Engine != nil {
			r.Processes += g.Engine.RunningProcesses
			if g.FilesystemBytes != nil {
				r.FilesystemBytes += *g.FilesystemBytes
			}
		}
	}
	next := make(map[*agentos.Sidecar]sidecarSample, len(samples))
	for sc, pu := range samples {
		tenant := tenantOf[sc]
		next[sc] = sidecarSample{cpu: pu.CPU, tenant: tenant}
		if tenant == "" {
			continue
		}
		r := row(tenant)
		r.MemoryBytes += pu.RSS
		if prev, ok := m.sidecars[sc]; ok && prev.tenant == tenant {
			if m.cpu == nil {
				m.cpu = map[string]time.Duration{}
			}
			m.cpu[r.Tenant] += max(pu.CPU-prev.cpu, 0)
		}
	}
	// Sidecars not seen now (gone, or holding no tenant VM) start afresh.
	m.sidecars = next
	// Every label given out is listed, so that its counter stays.
	for tenant := range m.labels {
		row(tenant)
	}
	if _, ok := m.cpu[OtherTenants]; ok {
		row(OtherTenants)
	}
	m.tenants = m.tenants[:0]
	for label, r := range by {
		r.CPU = m.cpu[label]
		m.tenants = append(m.tenants, *r)
	}
	slices.SortFunc(m.tenants, func(a, b TenantUsage) int { return cmp.Compare(a.Tenant, b.Tenant) })
}

// labelLocked returns a tenant's metric label: its id while fewer than
// MaxTenants have one of their own, else OtherTenants. m.mu must be held.
func (m *Meter) labelLocked(tenant string) string {
	switch {
	case m.labels[tenant]:
		return tenant
	case tenant == OtherTenants || len(m.labels) >= MaxTenants:
		return OtherTenants
	}
	if m.labels == nil {
		m.labels = map[string]bool{}
	}
	m.labels[tenant] = true
	return tenant
}
