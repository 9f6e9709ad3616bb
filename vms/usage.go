package vms

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

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
// Reads are cached for usageTTL and a VM has at most one collection in
// flight, so any number of readers costs one engine call per VM per
// usageTTL. A goroutine the service owns collects every live VM each
// usageInterval, for the per-tenant figures of /metrics (TenantUsage).

const (
	// usageTTL is how long a VM's figures are served before they are
	// collected again.
	usageTTL = 2 * time.Second
	// usageInterval is how often every live VM is collected for metrics.
	usageInterval = 10 * time.Second
	// usageTimeout bounds one VM's collection: the engine call waits
	// behind whatever else its sidecar is doing.
	usageTimeout = 5 * time.Second
	// usageParallel bounds the collections of one metrics pass at once.
	usageParallel = 4
	// MaxUsageTenants bounds the tenant label of the usage metrics: the
	// first tenants measured get a label of their own, kept for the
	// service's life so that counters stay monotonic; the others are
	// summed under OtherTenants.
	MaxUsageTenants = 50
	// OtherTenants is the label of the tenants past MaxUsageTenants. Tenant
	// ids are "ten_" and hex digits (or a name an admin chose, which the
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
	// alone, since the service started: a counter.
	CPU time.Duration
	// FilesystemBytes and Processes sum the engine's figures of the
	// tenant's VMs.
	FilesystemBytes uint64
	Processes       uint64
}

// usageState is the service's usage bookkeeping. Its mu is taken after
// Service.mu, never before, and never across an engine call.
type usageState struct {
	mu  sync.Mutex
	vms map[*liveVM]*vmUsage
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

// Usage returns a tenant's VM's usage. A running VM's figures are at most
// usageTTL old; a hibernated or waking VM is answered without waking it or
// waiting for it, with its image's size alone. Reading the usage is not
// use: it does not keep a VM from going idle. A VM being created or ended
// is CodeConflict.
func (s *Service) Usage(ctx context.Context, tenantID, id string) (Usage, error) {
	if lv := s.liveForUsage(tenantID, id); lv != nil {
		return s.usageOf(ctx, lv)
	}
	rec, err := s.store.GetVM(ctx, tenantID, id)
	if err != nil {
		return Usage{}, err
	}
	switch {
	case rec.State == gateway.VMHibernated || rec.State == gateway.VMWaking:
		// A waking VM is answered as the hibernated one it still is, rather
		// than waited for: a page opened on a hibernated VM reads its usage
		// while the same page wakes it.
		out := Usage{VMID: rec.ID, State: rec.State, CollectedAt: s.cfg.Now().UTC()}
		if rec.Image != "" {
			out.ImageBytes = &rec.ImageBytes
		}
		return out, nil
	case rec.State == gateway.VMReady && rec.Node == s.cfg.NodeID:
		// A wake finished between the two reads above, or is about to: its
		// record says ready a moment before the VM takes calls.
		if lv := s.liveForUsage(tenantID, id); lv != nil {
			return s.usageOf(ctx, lv)
		}
		if s.wakingHere(id) {
			return Usage{VMID: rec.ID, State: gateway.VMWaking, CollectedAt: s.cfg.Now().UTC()}, nil
		}
	}
	return Usage{}, stateConflict(rec)
}

// liveForUsage returns a tenant's VM this service runs, without marking it
// used as liveOf does.
func (s *Service) liveForUsage(tenantID, id string) *liveVM {
	s.mu.Lock()
	lv := s.live[id]
	s.mu.Unlock()
	if lv == nil || lv.tenantID != tenantID {
		return nil
	}
	lv.mu.Lock()
	ended := lv.ended
	lv.mu.Unlock()
	if ended {
		return nil
	}
	return lv
}

// usageOf returns lv's figures, at most usageTTL old.
func (s *Service) usageOf(ctx context.Context, lv *liveVM) (Usage, error) {
	return s.usage.get(ctx, lv, s.cfg.Now, func(ctx context.Context) (Usage, error) { return s.collectUsage(ctx, lv) })
}

// get returns lv's cached figures while fresh, else joins the collection in
// flight or runs collect itself: one collection per VM at a time, whoever
// asks. A failed collection is not cached; the next caller runs another.
func (u *usageState) get(ctx context.Context, lv *liveVM, now func() time.Time, collect func(context.Context) (Usage, error)) (Usage, error) {
	for {
		u.mu.Lock()
		st := u.vmLocked(lv)
		if !st.at.IsZero() && now().Sub(st.at) < usageTTL {
			out := st.last
			u.mu.Unlock()
			return out, nil
		}
		if ch := st.flight; ch != nil {
			u.mu.Unlock()
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
		u.mu.Unlock()
		out, err := collect(ctx)
		u.mu.Lock()
		st.flight = nil
		if err == nil {
			st.last, st.at = out, now()
		}
		u.mu.Unlock()
		close(ch)
		return out, err
	}
}

// vmLocked returns lv's usage record, made on first use. u.mu must be held.
func (u *usageState) vmLocked(lv *liveVM) *vmUsage {
	if u.vms == nil {
		u.vms = map[*liveVM]*vmUsage{}
	}
	st := u.vms[lv]
	if st == nil {
		st = &vmUsage{}
		u.vms[lv] = st
	}
	return st
}

// collectUsage asks the engine for lv's resource snapshot and the host for
// its sidecar's memory and CPU time.
func (s *Service) collectUsage(ctx context.Context, lv *liveVM) (Usage, error) {
	ctx, cancel := context.WithTimeout(ctx, usageTimeout)
	defer cancel()
	snap, err := lv.vm.Resources(ctx)
	if err != nil {
		return Usage{}, EngineError(err, "usage")
	}
	lv.mu.Lock()
	state := gateway.VMReady
	if lv.hibernating {
		state = gateway.VMHibernating
	}
	lv.mu.Unlock()
	out := Usage{VMID: lv.id, State: state, CollectedAt: s.cfg.Now().UTC(), Engine: engineCounts(snap)}
	out.FilesystemBytes, out.Inodes = counted(snap, "vm_filesystem_bytes"), counted(snap, "vm_inodes")

	s.mu.Lock()
	own := s.ownSidecarLocked(lv)
	s.mu.Unlock()
	out.OwnSidecar = own
	host, err := lv.vm.Sidecar().Usage()
	if err != nil {
		// The sidecar died meanwhile: the engine's figures stand, the
		// host's are unknown.
		s.log.Debug().Err(err).Str("vm", lv.id).Msg("usage: read the sidecar's /proc")
	}
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	st := s.usage.vmLocked(lv)
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

// beginUsageLocked takes a VM's first CPU sample as it goes live, so that its
// CPU time counts from its start. s.mu must be held.
func (s *Service) beginUsageLocked(lv *liveVM) {
	own := s.ownSidecarLocked(lv)
	host, err := lv.vm.Sidecar().Usage()
	if err != nil {
		return
	}
	s.usage.mu.Lock()
	s.usage.vmLocked(lv).account(host.CPU, own)
	s.usage.mu.Unlock()
}

// ownSidecarLocked reports whether no other tenant VM (a VM this service
// runs) is on lv's sidecar. s.mu must be held.
func (s *Service) ownSidecarLocked(lv *liveVM) bool {
	others := lv.vm.Sidecar().VMs()
	if len(others) <= 1 {
		return true
	}
	live := make(map[*agentos.VM]bool, len(s.live))
	for _, o := range s.live {
		live[o.vm] = true
	}
	for _, v := range others {
		if v != lv.vm && live[v] {
			return false
		}
	}
	return true
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

// TenantUsage returns the per-tenant figures of the last metrics pass, by
// label, and how long that pass took. Every label given out is listed, with
// zeros once its tenant has no VM here, so that its CPU counter stays.
func (s *Service) TenantUsage() ([]TenantUsage, time.Duration) {
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	return slices.Clone(s.usage.tenants), s.usage.pass
}

// collectAllUsage is the metrics pass: it collects every live VM (served
// from the cache when a read just did), usageParallel at once, then
// samples each sidecar for the tenants' memory and CPU time.
func (s *Service) collectAllUsage() {
	start := time.Now()
	s.mu.Lock()
	lvs := slices.Collect(maps.Values(s.live))
	s.mu.Unlock()
	ctx := s.life
	got := make([]*Usage, len(lvs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, usageParallel)
	for i, lv := range lvs {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			u, err := s.usageOf(ctx, lv)
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, agentos.ErrVMDisposed) {
					s.log.Debug().Err(err).Str("vm", lv.id).Msg("usage")
				}
				return
			}
			got[i] = &u
		})
	}
	wg.Wait()

	// Which tenant each sidecar runs VMs of alone.
	tenantOf := map[*agentos.Sidecar]string{}
	for _, lv := range lvs {
		sc := lv.vm.Sidecar()
		if t, seen := tenantOf[sc]; seen && t != lv.tenantID {
			tenantOf[sc] = ""
		} else if !seen {
			tenantOf[sc] = lv.tenantID
		}
	}
	samples := make(map[*agentos.Sidecar]agentos.ProcessUsage, len(tenantOf))
	for sc := range tenantOf {
		if pu, err := sc.Usage(); err == nil {
			samples[sc] = pu
		}
	}

	rows := make([]tallyVM, len(lvs))
	for i, lv := range lvs {
		rows[i] = tallyVM{tenant: lv.tenantID, usage: got[i]}
	}
	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	u.tallyLocked(rows, tenantOf, samples)
	for lv := range u.vms {
		lv.mu.Lock()
		ended := lv.ended
		lv.mu.Unlock()
		if ended {
			delete(u.vms, lv)
		}
	}
	u.pass = time.Since(start)
}

// tallyVM is a live VM as a metrics pass saw it: usage is nil when its
// collection failed.
type tallyVM struct {
	tenant string
	usage  *Usage
}

// tallyLocked sums a metrics pass by tenant label into u.tenants: the VMs'
// engine figures, and the memory and CPU time of each sidecar that ran one
// tenant's VMs alone (tenantOf; "" for several), whose CPU time since the
// last pass counts when it was that tenant's then too. u.mu must be held.
func (u *usageState) tallyLocked(vms []tallyVM, tenantOf map[*agentos.Sidecar]string, samples map[*agentos.Sidecar]agentos.ProcessUsage) {
	by := map[string]*TenantUsage{}
	row := func(tenant string) *TenantUsage {
		label := u.labelLocked(tenant)
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
		if prev, ok := u.sidecars[sc]; ok && prev.tenant == tenant {
			if u.cpu == nil {
				u.cpu = map[string]time.Duration{}
			}
			u.cpu[r.Tenant] += max(pu.CPU-prev.cpu, 0)
		}
	}
	// Sidecars not seen now (gone, or holding no tenant VM) start afresh.
	u.sidecars = next
	// Every label given out is listed, so that its counter stays.
	for tenant := range u.labels {
		row(tenant)
	}
	if _, ok := u.cpu[OtherTenants]; ok {
		row(OtherTenants)
	}
	u.tenants = u.tenants[:0]
	for label, r := range by {
		r.CPU = u.cpu[label]
		u.tenants = append(u.tenants, *r)
	}
	slices.SortFunc(u.tenants, func(a, b TenantUsage) int { return cmp.Compare(a.Tenant, b.Tenant) })
}

// labelLocked returns a tenant's metric label: its id while fewer than
// MaxUsageTenants have one of their own, else OtherTenants. u.mu must be
// held.
func (u *usageState) labelLocked(tenant string) string {
	switch {
	case u.labels[tenant]:
		return tenant
	case tenant == OtherTenants || len(u.labels) >= MaxUsageTenants:
		return OtherTenants
	}
	if u.labels == nil {
		u.labels = map[string]bool{}
	}
	u.labels[tenant] = true
	return tenant
}
