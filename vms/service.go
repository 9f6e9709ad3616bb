// Package vms runs tenants' VMs: it places them on the sidecar pool, records
// their life in the store, and keeps what the HTTP layer streams (process
// output, shell output, VM events) in bounded, resumable logs (package streamlog).
package vms

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/images"
	"github.com/agentos-gateway/agentos-gateway/metering"
	"github.com/agentos-gateway/agentos-gateway/sidecarpool"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vmspec"
	"github.com/agentos-gateway/agentos-gateway/warmpool"
)

// Store is what the service needs of the database.
type Store interface {
	CreateVMWithinQuota(ctx context.Context, vm gateway.VM, maxVMs int) error
	GetVM(ctx context.Context, tenantID, id string) (gateway.VM, error)
	ListVMs(ctx context.Context, f gateway.VMFilter) (gateway.Page[gateway.VM], error)
	SetVMState(ctx context.Context, id string, to gateway.VMState, reason, sidecarID string) (gateway.VM, error)
	DeleteVM(ctx context.Context, tenantID, id string) (gateway.VM, error)
	PurgeEndedVMs(ctx context.Context, before time.Time) (int, error)
	// Hibernation (hibernate.go).
	GetTenant(ctx context.Context, id string) (gateway.Tenant, error)
	HibernateVM(ctx context.Context, id, image string, bytes int64, sessionsImage, reason string) (gateway.VM, []string, error)
	RecordCheckpoint(ctx context.Context, id string, layers []gateway.Checkpoint, at time.Time) ([]string, error)
	DropCheckpoint(ctx context.Context, id string) ([]string, error)
	ClaimWake(ctx context.Context, tenantID, id, node string, maxVMs int) (gateway.VM, error)
	WokeVM(ctx context.Context, id, sidecarID, reason string) (gateway.VM, []string, error)
	UpdateVMSpec(ctx context.Context, tenantID, id string, change func(spec *gateway.VMSpec) error) (gateway.VM, error)
	HibernatedBefore(ctx context.Context, before time.Time, limit int) ([]gateway.VM, error)
}

// Lease is a counted hold on a pooled sidecar: one type for the VMs of
// tenants and the warm VMs, since a warm VM's hold becomes its tenant's.
type Lease = warmpool.Lease

// Pool places VMs on sidecars, as it places warm VMs.
type Pool = warmpool.Placer

// PoolOf is the sidecar pool as a Pool: the pool returns its concrete
// lease, which Go does not convert for a method that returns the interface.
func PoolOf(p *sidecarpool.Pool) Pool { return sidecarPool{p} }

type sidecarPool struct{ p *sidecarpool.Pool }

func (a sidecarPool) Acquire(ctx context.Context, tenantID string, isolated bool) (Lease, error) {
	l, err := a.p.Acquire(ctx, tenantID, isolated)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Config tunes the service.
type Config struct {
	// DataDir holds the session databases of agent VMs.
	DataDir string
	// OutputBufferBytes bounds each process's and shell's replay log
	// (default 1 MiB).
	OutputBufferBytes int
	// EventBufferBytes bounds each VM's event log (default 256 KiB).
	EventBufferBytes int
	// IdleCheck is how often idle VMs are looked for (default 1 s).
	IdleCheck time.Duration
	// Retention is how long the records of ended (disposed or lost) VMs
	// are kept before they are purged (default 7 days).
	Retention time.Duration
	// PurgeInterval is how often ended records past Retention are purged
	// (default: a tenth of Retention, at least 1 s and at most 1 h).
	PurgeInterval time.Duration
	// ExecTimeoutDefault is the deadline of an exec that sets none (default
	// 10 min); ExecTimeoutMax is the longest one may ask for (default 1 h).
	ExecTimeoutDefault, ExecTimeoutMax time.Duration
	Log                                zerolog.Logger
	Now                                func() time.Time
	// Events, when set, is told of the VMs' processes' ends and schedule
	// runs, for webhooks (the store writes their changes of state).
	Events EventSink
	// NodeID names this gateway node in the VM records it creates.
	NodeID string
	// Software says which software packages the engine has installed, so
	// that a VM asking for others is refused before any sidecar is asked
	// (nil: the sidecar's own check applies).
	Software Software
	// MountAllow are the host directories tenants may mount (--mount-allow,
	// see ParseMountAllow); none: host directory mounts are refused.
	MountAllow []vmspec.MountRule
	// Snapshots opens the snapshots VMs are created from (VMSpec.FromSnapshot).
	Snapshots SnapshotSource
	// Warm, when set, serves the creates it can with warm VMs (see
	// warmServable); its owner shuts it down before the pool.
	Warm WarmVMs
	// Images keeps the root filesystems of hibernated VMs (nil: VMs cannot
	// hibernate). WakeTimeout bounds a wake (default DefaultWakeTimeout).
	Images      ImageStore
	WakeTimeout time.Duration
	// HibernatedRetention is how long a VM may stay hibernated before it
	// is deleted with its image, checked every PurgeInterval (0: kept).
	HibernatedRetention time.Duration
	// OnIdle is what becomes of a VM idle past its timeout that did not
	// choose (VMSpec.OnIdle); OnShutdown what becomes of the running VMs
	// when the service closes. Either is OnIdleHibernate (the default
	// when Images is set) or OnIdleDispose.
	OnIdle, OnShutdown string
	// CheckpointInterval is how often a VM that sets no checkpointSeconds
	// is checkpointed (0: never; whole seconds).
	CheckpointInterval time.Duration
}

// What becomes of an idle VM, or of the running VMs at shutdown.
const (
	OnIdleHibernate = "hibernate"
	OnIdleDispose   = "dispose"
)

// Software is what the service needs of the engine's install folder.
type Software interface {
	Installed(pkg string) bool
}

// Service runs VMs for tenants.
type Service struct {
	cfg   Config
	store Store
	pool  Pool
	log   zerolog.Logger
	// images captures, checkpoints and restores the VMs' files in
	// cfg.Images (its Blobs nil: none are kept).
	images images.Store

	mu            sync.Mutex
	live          map[string]*liveVM
	creatingCount int            // creates in progress
	procCount     map[string]int // running processes per tenant
	closing       bool
	// cordoned refuses new VMs while the node drains.
	cordoned bool
	observer FileObserver
	setup    VMSetup

	// waking are the wakes in progress on this node, by VM id.
	waking map[string]*wakeCall
	// ckptSlots bounds the scheduled checkpoints running at once.
	ckptSlots chan struct{}
	// usage caches the VMs' usage figures and the tenants' (usage.go).
	usage metering.Meter

	stop chan struct{}
	// life ends when Close begins: the work the service does on its own
	// behalf (a wake) stops with it.
	life    context.Context
	endLife context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a service and starts its idle reaper; Close stops it.
func New(cfg Config, store Store, pool Pool) *Service {
	if cfg.OutputBufferBytes <= 0 {
		cfg.OutputBufferBytes = 1 << 20
	}
	if cfg.EventBufferBytes <= 0 {
		cfg.EventBufferBytes = 256 << 10
	}
	if cfg.ExecTimeoutDefault <= 0 {
		cfg.ExecTimeoutDefault = 10 * time.Minute
	}
	if cfg.ExecTimeoutMax <= 0 {
		cfg.ExecTimeoutMax = time.Hour
	}
	cfg.ExecTimeoutDefault = min(cfg.ExecTimeoutDefault, cfg.ExecTimeoutMax)
	if cfg.IdleCheck <= 0 {
		cfg.IdleCheck = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.PurgeInterval <= 0 {
		cfg.PurgeInterval = min(max(cfg.Retention/10, time.Second), time.Hour)
	}
	if cfg.WakeTimeout <= 0 {
		cfg.WakeTimeout = DefaultWakeTimeout
	}
	// Without an image store nothing can hibernate; with one, hibernation
	// is the default.
	switch {
	case cfg.Images == nil:
		cfg.OnIdle, cfg.OnShutdown = OnIdleDispose, OnIdleDispose
	default:
		cfg.OnIdle = cmp.Or(cfg.OnIdle, OnIdleHibernate)
		cfg.OnShutdown = cmp.Or(cfg.OnShutdown, OnIdleHibernate)
	}
	s := &Service{
		cfg: cfg, store: store, pool: pool, log: cfg.Log,
		images: images.Store{Blobs: cfg.Images, EngineError: EngineError, Log: cfg.Log},
		usage:  metering.Meter{Log: cfg.Log},
		live:   map[string]*liveVM{}, procCount: map[string]int{}, waking: map[string]*wakeCall{},
		ckptSlots: make(chan struct{}, checkpointParallel), stop: make(chan struct{}),
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	s.mu.Lock()
	s.goLocked(func() { s.every(s.cfg.IdleCheck, s.reapIdle) })
	s.goLocked(func() { s.every(s.cfg.PurgeInterval, s.purgeEnded) })
	s.goLocked(func() { s.every(s.cfg.IdleCheck, s.checkpointDue) })
	s.goLocked(func() { s.every(metering.Interval, s.collectAllUsage) })
	s.mu.Unlock()
	return s
}

// shutdownParallel bounds the VMs Close or Drain hibernates or disposes at
// once: each capture streams a whole root filesystem through the store.
const shutdownParallel = 4

// hibernateTimeout bounds a hibernation the service starts on its own
// behalf (idle, drain): the capture of a large tree takes a while.
const hibernateTimeout = 2 * time.Minute

// DefaultRetention is how long ended VM records are kept by default.
const DefaultRetention = 7 * 24 * time.Hour

// Bounds of the work the service does on its own behalf, outside any
// request's deadline.
const (
	storeWriteTimeout = 10 * time.Second
	disposeTimeout    = 30 * time.Second
	// killTimeout bounds killing a process nobody will watch.
	killTimeout = 10 * time.Second
	// shellKillTimeout bounds the wait for a killed shell's exit. A shell
	// at its prompt is a guest blocked reading its terminal, which the
	// engine (0.2.21) wakes in 10 s slices, and every call on that process
	// (a signal, a stdin write) waits for the end of the slice: a kill 3 s
	// into it was confirmed 7.2 s later, alone on the machine, and more
	// than 20 s later beside the test suite. A shell running a command is
	// killed in milliseconds.
	shellKillTimeout = 45 * time.Second
)

// liveVM is a VM the gateway runs right now.
type liveVM struct {
	id       string
	tenantID string
	vm       *agentos.VM
	lease    Lease
	events   *streamlog.Log[gateway.VMEvent]

	// permMu serializes changes of the VM's permissions, so that the
	// engine and the record end with the same.
	permMu sync.Mutex

	mu sync.Mutex
	// idle is how long the VM may be idle, and onIdle what becomes of it
	// then (OnIdleHibernate or OnIdleDispose): PATCH changes them.
	idle        time.Duration
	onIdle      string
	procs       map[uint32]*Process
	exited      []uint32 // pids of exited processes, oldest first
	shells      map[string]*Shell
	lastActive  time.Time
	busy        int // calls and open streams in progress
	ended       bool
	hibernating bool
	// image is the VM's captured root filesystem once it hibernates, and
	// sessionsDB the path of its agent session database, kept for the
	// image store past the engine's VM.
	image       *images.Image
	sessionsDB  string
	releaseOnce sync.Once
	// done is closed once the VM's final state is in the store.
	done chan struct{}
	// exitedShells are the ids of ended shells, oldest first.
	exitedShells []string
	// ckpt is the VM's checkpoint state (checkpoint.go).
	ckpt checkpoints
}

func newID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Drain makes Create refuse new VMs (CodeUnavailable), and wakes refuse to
// start, from now on: the node drains. When the running VMs are to
// hibernate at a stop (Config.OnShutdown), it hibernates every one of them
// now, a few at a time, in the background: the node can leave as soon as
// they are in the store, and each wakes on its next use on another node.
// Otherwise they run on until they end or the drain's deadline.
func (s *Service) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cordoned = true
	if s.closing || s.cfg.OnShutdown != OnIdleHibernate {
		return
	}
	lvs := slices.Collect(maps.Values(s.live))
	s.goLocked(func() {
		// Not bounded by s.life: a stop during the drain waits for the
		// hibernations in progress rather than cutting them.
		ctx, cancel := context.WithTimeout(context.Background(), hibernateTimeout)
		defer cancel()
		s.hibernateAll(ctx, lvs, ReasonDrain, false)
	})
}

// hibernateAll hibernates lvs, shutdownParallel at once, each bounded by
// ctx; with orDispose, a VM that does not hibernate is disposed.
func (s *Service) hibernateAll(ctx context.Context, lvs []*liveVM, reason string, orDispose bool) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, shutdownParallel)
	for _, lv := range lvs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if s.cfg.OnShutdown == OnIdleHibernate {
				err := s.hibernate(ctx, lv, reason)
				if err == nil || errors.Is(err, errHibernating) {
					// Another hibernation (an idle one), or the VM's
					// end, is ahead of this one.
					return
				}
				s.log.Warn().Err(err).Str("vm", lv.id).Str("reason", reason).Msg("hibernate")
			}
			if orDispose {
				s.endVM(ctx, lv, gateway.VMDisposed, "the gateway shut down", true)
			}
		})
	}
	wg.Wait()
}

// Cordoned reports whether the service takes no new VMs and wakes none:
// the node drains.
func (s *Service) Cordoned() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cordoned
}

// Runs reports whether this service runs the VM id.
func (s *Service) Runs(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[id] != nil
}

// LiveCount returns how many VMs this service runs or is creating.
func (s *Service) LiveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live) + s.creatingCount
}

// Create creates a VM for a tenant.
func (s *Service) Create(ctx context.Context, tenant gateway.Tenant, spec gateway.VMSpec) (gateway.VM, error) {
	opts, err := vmOptions(spec, s.cfg)
	if err != nil {
		return gateway.VM{}, err
	}
	root, err := s.readSnapshot(ctx, tenant.ID, spec.FromSnapshot)
	if err != nil {
		return gateway.VM{}, err
	}
	defer root.Close()
	opts.RootSnapshot = root.Entries
	s.mu.Lock()
	closing, cordoned := s.closing, s.cordoned
	if !closing && !cordoned {
		// Counted before the record exists, so that a drain waiting for
		// this node's VMs to be gone sees this one coming.
		s.creatingCount++
	}
	s.mu.Unlock()
	switch {
	case closing:
		return gateway.VM{}, errShuttingDown()
	case cordoned:
		return gateway.VM{}, gateway.Errorf(gateway.CodeUnavailable, "node %s is draining and takes no new VMs", s.cfg.NodeID).WithDetail("node", s.cfg.NodeID)
	}
	defer func() {
		s.mu.Lock()
		s.creatingCount--
		s.mu.Unlock()
	}()
	// The store counts the tenant's live VMs and inserts the record in one
	// transaction holding the tenant's row, so that creates on this or any
	// other node sharing the store cannot both pass the last free slot.
	now := s.cfg.Now().UTC()
	rec := gateway.VM{ID: newID("vm_"), TenantID: tenant.ID, State: gateway.VMCreating, Node: s.cfg.NodeID, Spec: spec, CreatedAt: now, UpdatedAt: now}
	if err := s.store.CreateVMWithinQuota(ctx, rec, tenant.Quotas.MaxVMs); err != nil {
		return gateway.VM{}, err
	}

	// made grows with each step; every failure below hands it to undoCreate,
	// which takes back what exists so far.
	made := halfMade{rec: rec}
	fail := func(err error) (gateway.VM, error) {
		s.undoCreate(ctx, made, err)
		return gateway.VM{}, err
	}
	if err := s.placeRoot(ctx, tenant, rec, opts, root, &made); err != nil {
		return fail(err)
	}
	lease := made.lease
	lv := s.newLiveVM(rec, made.vm, lease)
	// The VM runs now, whatever the caller does: its record must say so, or
	// say that it failed, within a bounded time. A record left creating
	// would count against the tenant's quota until the gateway restarts.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
	ready, err := s.store.SetVMState(wctx, rec.ID, gateway.VMReady, "", lease.SidecarID())
	cancel()
	if err != nil {
		return fail(gateway.Wrap(gateway.CodeUnavailable, err, "the VM could not be recorded as ready; it was disposed"))
	}
	rec = ready
	if !s.goLive(lv, "") {
		s.endVM(context.WithoutCancel(ctx), lv, gateway.VMDisposed, "the gateway is shutting down", true)
		return gateway.VM{}, errShuttingDown()
	}
	return rec, nil
}

// newLiveVM is the gateway's hold on a VM the engine runs for rec.
func (s *Service) newLiveVM(rec gateway.VM, vm *agentos.VM, lease Lease) *liveVM {
	return &liveVM{
		id: rec.ID, tenantID: rec.TenantID, vm: vm, lease: lease,
		events: streamlog.New[gateway.VMEvent](s.cfg.EventBufferBytes),
		idle:   time.Duration(rec.Spec.IdleTimeoutSeconds) * time.Second,
		onIdle: cmp.Or(rec.Spec.OnIdle, s.cfg.OnIdle),
		procs:  map[uint32]*Process{}, shells: map[string]*Shell{}, lastActive: s.cfg.Now(),
		done: make(chan struct{}),
		// A VM restored from its checkpoint keeps it until its first own.
		ckpt: checkpoints{every: checkpointEvery(rec.Spec), last: s.cfg.Now(), chain: images.NewChain(rec.Checkpoints)},
	}
}

// goLive makes lv one of the service's VMs, whose calls it serves, and
// reports false, doing nothing, once Close has begun: the caller then ends
// lv itself. reason is why it became ready (empty for a create).
func (s *Service) goLive(lv *liveVM, reason string) bool {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return false
	}
	s.live[lv.id] = lv
	lv.events.Append(0, 64, gateway.VMEvent{Type: gateway.VMEventState, Time: s.cfg.Now().UTC(), State: gateway.VMReady, Reason: reason})
	s.goLocked(func() { s.watch(lv) })
	s.beginUsageLocked(lv)
	s.mu.Unlock()
	return true
}

// placeRoot places the engine's VM for rec, writes the files of its root
// filesystem that the create frame did not carry, and runs the setup on it:
// the steps a create and a wake share. made records each step, for the
// caller's undo.
func (s *Service) placeRoot(ctx context.Context, tenant gateway.Tenant, rec gateway.VM, opts agentos.VMOptions, root images.Root, made *halfMade) error {
	vm, lease, err := s.place(ctx, tenant, rec.Spec, opts)
	if err != nil {
		return err
	}
	made.vm, made.lease = vm, lease
	if err := s.images.Fill(ctx, vm, root); err != nil {
		return err
	}
	su := s.vmSetup()
	if su == nil {
		return nil
	}
	made.setUp = su
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	return su.SetUpVM(sctx, rec, BindingHost{vm})
}

// halfMade is what a create has made so far: the record always, then the
// engine's VM with its lease once placed, then the setup that ran on it.
type halfMade struct {
	rec   gateway.VM
	vm    *agentos.VM // nil until placed
	lease Lease       // nil until placed
	// setUp is the setup that ran on the VM, nil when none did; it learns
	// that the VM ended.
	setUp VMSetup
}

// undoTimeout bounds the whole undo of a failed create: the engine's dispose
// and the record's writes share it, so the undo takes no longer than those
// steps did when each had a timeout of its own.
const undoTimeout = disposeTimeout + storeWriteTimeout

// undoCreate takes back a create that failed at any step, so that it leaves
// nothing behind: the caller got the error and never learned the id. In the
// order the steps are undone: the engine's VM is disposed, the setup learns
// that it ended, the lease is released, and the record is ended, then
// deleted. The record is ended first since only an ended VM's record may be
// deleted; if the delete fails, the record stays disposed and says why. The
// undo runs detached from ctx, as it must also happen for a cancelled
// request.
func (s *Service) undoCreate(ctx context.Context, made halfMade, cause error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	s.undoPlacement(ctx, made, cause)
	id := made.rec.ID
	if _, err := s.store.SetVMState(ctx, id, gateway.VMDisposed, "create failed: "+gateway.ErrorMessage(cause), ""); err != nil {
		s.log.Error().Err(err).Str("vm", id).Msg("record failed create")
	} else if _, err := s.store.DeleteVM(ctx, made.rec.TenantID, id); err != nil {
		s.log.Error().Err(err).Str("vm", id).Msg("delete the record of a failed create")
	}
}

// undoPlacement disposes the engine's VM of a half-made create or wake,
// tells the setup that it ended, and releases its lease.
func (s *Service) undoPlacement(ctx context.Context, made halfMade, cause error) {
	id := made.rec.ID
	if made.vm != nil {
		if err := made.vm.Dispose(ctx); err != nil {
			s.log.Warn().Err(err).AnErr("cause", cause).Str("vm", id).Msg("dispose a VM whose create failed")
		}
	}
	if made.setUp != nil {
		made.setUp.VMEnded(id)
	}
	if made.lease != nil {
		made.lease.Release()
	}
}

// goTracked runs f on a goroutine that Close waits for, and reports
// false, running nothing, once Close has begun: the closing check and
// the wait group's Add happen under the same lock as Close's, so no
// goroutine can start after Close's Wait.
func (s *Service) goTracked(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.goLocked(f)
	return true
}

// goLocked is goTracked for a caller that holds s.mu and checked closing.
func (s *Service) goLocked(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func errShuttingDown() error {
	return gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down")
}

// vmOptions validates a spec and turns it into client options. (Env names
// and values are checked where the request is decoded.)
func vmOptions(spec gateway.VMSpec, cfg Config) (agentos.VMOptions, error) {
	o := agentos.VMOptions{
		Env: spec.Env, Software: spec.Software, Agents: spec.Agents, Limits: spec.Limits,
		LoopbackExemptPorts: spec.LoopbackExemptPorts, DataDir: cfg.DataDir,
	}
	for i, sw := range spec.Software {
		field := fmt.Sprintf("software[%d]", i)
		// Software comes from the engine's install folder by package name;
		// a host path would let a tenant mount any file of the host.
		if !packageName.MatchString(sw) {
			return o, gateway.Errorf(gateway.CodeInvalidArgument, "software %q must be a package name such as @agentos-software/pi", sw).WithDetail("field", field)
		}
		if cfg.Software != nil && !cfg.Software.Installed(sw) {
			return o, gateway.Errorf(gateway.CodeInvalidArgument, "software %q is not installed in this gateway", sw).WithDetail("field", field)
		}
	}
	for i, a := range spec.Agents {
		pkg, ok := agentos.AgentPackages[a]
		if !ok {
			return o, gateway.Errorf(gateway.CodeInvalidArgument, "unknown agent %q", a).WithDetail("field", fmt.Sprintf("agents[%d]", i))
		}
		if cfg.Software != nil && !cfg.Software.Installed(pkg) {
			return o, gateway.Errorf(gateway.CodeInvalidArgument, "agent %q is not installed in this gateway (its package %s is missing)", a, pkg).WithDetail("field", fmt.Sprintf("agents[%d]", i))
		}
	}
	if err := vmspec.CheckLimits(spec.Limits); err != nil {
		return o, err
	}
	if spec.Permissions != nil {
		p, err := vmspec.Permissions(spec.Permissions)
		if err != nil {
			return o, err
		}
		o.Permissions = p
	}
	return o, nil
}

// packageName is an npm package name, optionally scoped: what the engine's
// install folder holds, and nothing that reaches outside it.
var packageName = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)

// watch follows the client's view of a VM: it forwards limit warnings and
// notices when the VM is lost with its sidecar.
func (s *Service) watch(lv *liveVM) {
	for {
		sub := lv.vm.Subscribe(1024)
	events:
		for {
			select {
			case ev, ok := <-sub.C():
				if !ok {
					break events
				}
				switch ev.Type {
				case "limit_warning", "structured":
					lv.events.Append(0, 128, gateway.VMEvent{Type: gateway.VMEventType(ev.Type), Time: ev.Time.UTC(), Name: ev.Name, Detail: ev.Detail})
				}
			case <-s.stop:
				// Close ends the VM itself; a VM whose disposal failed
				// must not keep this goroutine (and Close) waiting.
				sub.Close()
				return
			}
		}
		if errors.Is(sub.Err(), agentos.ErrOutputOverflow) {
			lv.events.Append(0, 64, gateway.VMEvent{Type: gateway.VMEventStructured, Time: s.cfg.Now().UTC(), Name: "events_dropped"})
			continue
		}
		break
	}
	st, err := lv.vm.State()
	if st == agentos.VMLost {
		// The cause (the sidecar's pid, exit status and the tail of its
		// stderr, which a shared sidecar fills with every tenant's VMs) is
		// for the logs; tenants see a reason of their own.
		s.log.Warn().Err(err).Str("vm", lv.id).Msg("vm lost with its sidecar")
		s.endVM(context.Background(), lv, gateway.VMLost, "the sidecar hosting this VM died", false)
	}
}

// endVM moves a live VM to a final state, or to hibernated with the image
// hibernate captured: the record, its streams, its lease. With dispose, the
// VM is disposed first, bounded by ctx and 30 s.
func (s *Service) endVM(ctx context.Context, lv *liveVM, state gateway.VMState, reason string, dispose bool) {
	lv.mu.Lock()
	if lv.ended {
		lv.mu.Unlock()
		return
	}
	lv.ended = true
	lv.mu.Unlock()
	if dispose {
		ctx, cancel := context.WithTimeout(ctx, disposeTimeout)
		if err := lv.vm.Dispose(ctx); err != nil {
			s.log.Warn().Err(err).Str("vm", lv.id).Msg("dispose")
		}
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	defer cancel()
	if state == gateway.VMHibernated {
		if err := s.recordHibernated(ctx, lv, reason); err != nil {
			s.log.Error().Err(err).Str("vm", lv.id).Msg("record a hibernated vm")
			state, reason = gateway.VMLost, "its hibernation could not be recorded"
		}
	} else if _, err := s.store.SetVMState(ctx, lv.id, state, reason, ""); err != nil {
		s.log.Error().Err(err).Str("vm", lv.id).Str("state", string(state)).Msg("record vm state")
	}
	if state == gateway.VMDisposed {
		// A VM disposed of is not to be restored: its checkpoint goes. A
		// lost one keeps it, to be restored from (Wake).
		s.dropCheckpoint(ctx, lv)
	}
	s.mu.Lock()
	delete(s.live, lv.id)
	s.mu.Unlock()
	close(lv.done)
	if o := s.fileObserver(); o != nil {
		o.VMEnded(lv.id)
	}
	if su := s.vmSetup(); su != nil {
		su.VMEnded(lv.id)
	}
	s.stateEvent(lv, state, reason)
	final := gateway.Errorf(gateway.CodeConflict, "the VM is %s", state).WithDetail("state", state)
	if state.Final() {
		final.Err = ErrVMEnded
	}
	if reason != "" {
		final.Message += ": " + reason
	}
	// As api/openapi.yaml documents, the event stream of a VM that ended,
	// disposed or lost, ends with an error event: conflict, with the state.
	lv.events.Close(final)
	// Copy under the lock: the shell and process goroutines keep editing the
	// maps while the VM ends.
	lv.mu.Lock()
	procs := slices.Collect(maps.Values(lv.procs))
	shells := slices.Collect(maps.Values(lv.shells))
	lv.mu.Unlock()
	for _, p := range procs {
		p.vmEnded(final)
	}
	for _, sh := range shells {
		sh.vmEnded(final)
	}
	lv.releaseOnce.Do(lv.lease.Release)
}

// lookup returns the live VM of a tenant, waking it if it hibernates, or
// the reason it cannot be used.
func (s *Service) lookup(ctx context.Context, tenantID, id string) (*liveVM, error) {
	return s.lookupReason(ctx, tenantID, id, ReasonRequest)
}

// lookupReason is lookup, with the reason a wake records.
func (s *Service) lookupReason(ctx context.Context, tenantID, id, reason string) (*liveVM, error) {
	if lv := s.liveOf(tenantID, id); lv != nil {
		return lv, nil
	}
	rec, err := s.store.GetVM(ctx, tenantID, id)
	if err != nil {
		return nil, err
	}
	// A VM waking on this node is joined; one waking elsewhere is served
	// there (the HTTP layer routes to the node its record names).
	if rec.State == gateway.VMHibernated || (rec.State == gateway.VMWaking && rec.Node == s.cfg.NodeID && s.wakingHere(id)) {
		return s.wake(ctx, rec, reason)
	}
	if rec.State == gateway.VMReady && rec.Node == s.cfg.NodeID {
		// A wake finished between the two reads above.
		if lv := s.liveOf(tenantID, id); lv != nil {
			return lv, nil
		}
	}
	return nil, stateConflict(rec)
}

// liveOf returns a tenant's VM if this service runs it, marked as used now.
func (s *Service) liveOf(tenantID, id string) *liveVM {
	s.mu.Lock()
	lv := s.live[id]
	s.mu.Unlock()
	if lv == nil || lv.tenantID != tenantID {
		return nil
	}
	lv.touch(s.cfg.Now())
	return lv
}

// wakingHere reports whether this node is waking the VM id.
func (s *Service) wakingHere(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waking[id] != nil
}

func (lv *liveVM) touch(now time.Time) {
	lv.mu.Lock()
	lv.lastActive = now
	lv.mu.Unlock()
}

// hold marks the VM busy for the length of a call or stream.
func (lv *liveVM) hold(now time.Time) func() {
	lv.mu.Lock()
	lv.busy++
	lv.lastActive = now
	lv.mu.Unlock()
	return func() {
		lv.mu.Lock()
		lv.busy--
		lv.lastActive = time.Now()
		lv.mu.Unlock()
	}
}

// Usable reports whether a tenant's VM can take calls now.
func (s *Service) Usable(ctx context.Context, tenantID, id string) error {
	_, err := s.lookup(ctx, tenantID, id)
	return err
}

// Get returns a tenant's VM record.
func (s *Service) Get(ctx context.Context, tenantID, id string) (gateway.VM, error) {
	return s.store.GetVM(ctx, tenantID, id)
}

// List lists a tenant's VMs.
func (s *Service) List(ctx context.Context, f gateway.VMFilter) (gateway.Page[gateway.VM], error) {
	return s.store.ListVMs(ctx, f)
}

// Delete ends a tenant's VM, and is idempotent: a live VM is disposed and
// its record, now disposed, is returned with removed false; the record of a
// VM that already ended (disposed or lost) is removed, with removed true. A
// VM that is neither live here nor ended (it is still being created) is
// CodeConflict; a missing one CodeNotFound.
func (s *Service) Delete(ctx context.Context, tenantID, id string) (vm gateway.VM, removed bool, err error) {
	s.mu.Lock()
	lv := s.live[id]
	s.mu.Unlock()
	if lv == nil || lv.tenantID != tenantID {
		gone, err := s.store.DeleteVM(ctx, tenantID, id)
		if err != nil {
			return gateway.VM{}, false, err
		}
		// A hibernated VM goes with its images.
		for _, image := range gone.Images() {
			s.images.Discard(image)
		}
		return gateway.VM{}, true, nil
	}
	lv.touch(s.cfg.Now())
	if _, err := s.store.SetVMState(ctx, id, gateway.VMDisposing, "", ""); err != nil {
		return gateway.VM{}, false, err
	}
	s.stateEvent(lv, gateway.VMDisposing, "")
	s.endVM(context.WithoutCancel(ctx), lv, gateway.VMDisposed, "", true)
	vm, err = s.store.GetVM(ctx, tenantID, id)
	return vm, false, err
}

// purgeEnded removes the records of VMs that ended more than the retention
// ago, and the VMs hibernated for longer than theirs.
func (s *Service) purgeEnded() {
	s.purgeHibernated()
	ctx, cancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	defer cancel()
	n, err := s.store.PurgeEndedVMs(ctx, s.cfg.Now().Add(-s.cfg.Retention))
	switch {
	case err != nil:
		s.log.Error().Err(err).Msg("purge ended vms")
	case n > 0:
		s.log.Info().Int("vms", n).Dur("retention", s.cfg.Retention).Msg("purged ended vm records")
	}
}

// purgeBatch bounds the hibernated VMs one purge deletes; the next purge
// goes on.
const purgeBatch = 100

// purgeHibernated deletes the VMs hibernated for longer than
// HibernatedRetention, with their images. Nodes sharing the store may race
// for one: the delete is the store's, once.
func (s *Service) purgeHibernated() {
	if s.cfg.HibernatedRetention <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	defer cancel()
	old, err := s.store.HibernatedBefore(ctx, s.cfg.Now().Add(-s.cfg.HibernatedRetention), purgeBatch)
	if err != nil {
		s.log.Error().Err(err).Msg("list hibernated vms past their retention")
		return
	}
	for _, vm := range old {
		gone, err := s.store.DeleteVM(ctx, vm.TenantID, vm.ID)
		if err != nil {
			if gateway.ErrorCode(err) != gateway.CodeNotFound && gateway.ErrorCode(err) != gateway.CodeConflict {
				s.log.Error().Err(err).Str("vm", vm.ID).Msg("delete a hibernated vm past its retention")
			}
			continue
		}
		for _, image := range gone.Images() {
			s.images.Discard(image)
		}
		s.log.Info().Str("vm", vm.ID).Dur("retention", s.cfg.HibernatedRetention).Msg("deleted a vm hibernated past its retention")
	}
}

// every runs f every interval until Close.
func (s *Service) every(interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			f()
		}
	}
}

// Events returns a VM's event log, which the caller follows from the
// sequence it chooses, and the release that ends the hold it keeps on the VM:
// a VM someone follows is busy, so it is not reaped as idle.
func (s *Service) Events(ctx context.Context, tenantID, id string) (*streamlog.Log[gateway.VMEvent], func(), error) {
	lv, err := s.lookup(ctx, tenantID, id)
	if err != nil {
		return nil, nil, err
	}
	return lv.events, lv.hold(s.cfg.Now()), nil
}

// reapIdle disposes VMs idle past their timeout.
func (s *Service) reapIdle() {
	now := s.cfg.Now()
	var idle []*liveVM
	s.mu.Lock()
	for _, lv := range s.live {
		if lv.idleSince(now) {
			idle = append(idle, lv)
		}
	}
	s.mu.Unlock()
	for _, lv := range idle {
		lv.mu.Lock()
		onIdle, timeout := lv.onIdle, lv.idle
		lv.mu.Unlock()
		if onIdle == OnIdleHibernate && s.cfg.Images != nil {
			s.log.Info().Str("vm", lv.id).Dur("idleTimeout", timeout).Msg("hibernating idle vm")
			ctx, cancel := context.WithTimeout(context.Background(), hibernateTimeout)
			err := s.hibernate(ctx, lv, ReasonIdle)
			cancel()
			if err == nil || errors.Is(err, errHibernating) {
				continue
			}
			s.log.Warn().Err(err).Str("vm", lv.id).Msg("hibernate idle vm; disposing it")
		}
		s.log.Info().Str("vm", lv.id).Dur("idleTimeout", timeout).Msg("disposing idle vm")
		s.endVM(context.Background(), lv, gateway.VMDisposed, "idle timeout", true)
	}
}

func (lv *liveVM) idleSince(now time.Time) bool {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	if lv.idle <= 0 || lv.busy > 0 || lv.hibernating || now.Sub(lv.lastActive) < lv.idle {
		return false
	}
	for _, p := range lv.procs {
		if p.running() {
			return false
		}
	}
	for _, sh := range lv.shells {
		if sh.running() {
			return false
		}
	}
	return true
}

// Close disposes every live VM (bounded by ctx), ends their streams with
// a final event, and stops the service's goroutines, waiting for all of
// them.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return nil
	}
	s.closing = true
	lvs := make([]*liveVM, 0, len(s.live))
	for _, lv := range s.live {
		lvs = append(lvs, lv)
	}
	s.mu.Unlock()
	close(s.stop)
	s.endLife()
	// Every hibernation and disposal is bounded by ctx (and every store
	// write by its own timeout), so Close waits for all of them: nothing it
	// started outlives it, even when ctx expires. A VM whose hibernation
	// fails is disposed.
	s.hibernateAll(ctx, lvs, ReasonShutdown, true)
	s.wg.Wait()
	// A VM that an idle or drain hibernation had begun with is ended by now,
	// unless that hibernation failed: it is disposed.
	s.mu.Lock()
	left := slices.Collect(maps.Values(s.live))
	s.mu.Unlock()
	for _, lv := range left {
		s.endVM(ctx, lv, gateway.VMDisposed, "the gateway shut down", true)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("vms: shutdown: %w", err)
	}
	return nil
}

// StateCounts returns how many VMs this gateway runs, by state, for metrics.
func (s *Service) StateCounts() map[gateway.VMState]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[gateway.VMState]int{gateway.VMCreating: s.creatingCount, gateway.VMReady: 0}
	for _, lv := range s.live {
		lv.mu.Lock()
		if !lv.ended {
			out[gateway.VMReady]++
		}
		lv.mu.Unlock()
	}
	return out
}

// Ended returns a channel closed once a VM's final state (disposed or lost)
// is in the store, so that whoever learnt of its end from the engine can
// report it consistently with the record; it is closed already for a VM
// this service does not run.
func (s *Service) Ended(id string) <-chan struct{} {
	s.mu.Lock()
	lv := s.live[id]
	s.mu.Unlock()
	if lv == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return lv.done
}

// AgentHost returns the agent host of a tenant's live VM, for the agent
// sessions that run in it, and holds the VM busy until release is called.
func (s *Service) AgentHost(ctx context.Context, tenantID, id string) (host AgentHost, release func(), err error) {
	lv, err := s.lookup(ctx, tenantID, id)
	if err != nil {
		return AgentHost{}, nil, err
	}
	// An agent writes files of its own: while a session holds the host,
	// checkpoints compare the whole tree.
	done, guestDone := lv.hold(s.cfg.Now()), lv.guestRuns()
	return AgentHost{lv.vm}, func() { guestDone(); done() }, nil
}
