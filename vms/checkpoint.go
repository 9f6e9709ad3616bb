package vms

import (
	"context"
	"errors"
	"path"
	"slices"
	"sync"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/images"
)

// A checkpoint keeps a running VM's files in the store, so that a VM lost
// with its sidecar or its node can be restored under its id (Wake): the
// layers of an images.Chain, a full capture then the changes of each later
// checkpoint (images/checkpoint.go tells how they are found and kept).
// This service says when a VM is checkpointed and what the images
// package cannot see by itself: the files API's own changes, journaled as
// each call begins, which are exact, and whether guest code (a process,
// shell, exec or agent session) ran since the last checkpoint and may
// have written anywhere, so that the whole tree must be compared.

// ReasonRestore is the reason of a VM woken from its checkpoint after it
// was lost.
const ReasonRestore = "restore"

const (
	// checkpointParallel bounds the checkpoints the service runs at once
	// on its own schedule: each keeps a sidecar busy with file calls.
	checkpointParallel = 2
	// checkpointTimeout bounds one checkpoint.
	checkpointTimeout = 10 * time.Minute
	// maxJournal bounds the files API's changes kept between checkpoints;
	// past it the next checkpoint compares the whole tree.
	maxJournal = 4096
)

// checkpoints is a live VM's checkpoint state, guarded by the liveVM's mu
// (run serializes the checkpoints themselves).
type checkpoints struct {
	run sync.Mutex
	// every is how often the service checkpoints the VM (0: never), and
	// last when the last checkpoint began or the VM came up.
	every time.Duration
	last  time.Time
	// chain is the recorded checkpoint, guarded by its own lock.
	chain       *images.Chain
	journal     []images.Change
	journalFull bool
	// guestHeld counts the guest runs in progress (execs, processes,
	// shells, agent sessions) and guestGen moves at each start and end;
	// scannedGen is guestGen when the last scan began.
	guestHeld  int
	guestGen   uint64
	scannedGen uint64
}

// guestRuns marks the start of guest code that may write files, and returns
// the mark of its end.
func (lv *liveVM) guestRuns() func() {
	lv.mu.Lock()
	lv.ckpt.guestHeld++
	lv.ckpt.guestGen++
	lv.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			lv.mu.Lock()
			lv.ckpt.guestHeld--
			lv.ckpt.guestGen++
			lv.mu.Unlock()
		})
	}
}

// journal records paths the files API is about to change.
func (lv *liveVM) journal(tree bool, paths ...string) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	for _, p := range paths {
		if len(lv.ckpt.journal) >= maxJournal {
			lv.ckpt.journalFull = true
			lv.ckpt.journal = nil
			return
		}
		if !lv.ckpt.journalFull {
			lv.ckpt.journal = append(lv.ckpt.journal, images.Change{Path: path.Clean(p), Tree: tree})
		}
	}
}

// Checkpoint checkpoints a tenant's running VM now and returns its record.
// A hibernated VM, whose files are all in the store, is returned as it is;
// a VM in another state is CodeConflict.
func (s *Service) Checkpoint(ctx context.Context, tenantID, id string) (gateway.VM, error) {
	if s.cfg.Images == nil {
		return gateway.VM{}, errNoImages()
	}
	lv := s.liveOf(tenantID, id)
	if lv == nil {
		return s.storedOrConflict(ctx, tenantID, id)
	}
	if err := s.checkpoint(ctx, lv); err != nil {
		return gateway.VM{}, err
	}
	return s.store.GetVM(ctx, tenantID, id)
}

// checkpointDue starts the checkpoints whose interval has passed, at most
// checkpointParallel at once; one still running is not started again.
func (s *Service) checkpointDue() {
	if s.cfg.Images == nil {
		return
	}
	now := s.cfg.Now()
	s.mu.Lock()
	type dueVM struct {
		lv   *liveVM
		last time.Time
	}
	var due []dueVM
	for _, lv := range s.live {
		lv.mu.Lock()
		if lv.ckpt.every > 0 && !lv.ended && !lv.hibernating && now.Sub(lv.ckpt.last) >= lv.ckpt.every {
			due = append(due, dueVM{lv, lv.ckpt.last})
		}
		lv.mu.Unlock()
	}
	// The longest waiting go first.
	slices.SortFunc(due, func(a, b dueVM) int { return a.last.Compare(b.last) })
	for _, d := range due {
		lv := d.lv
		select {
		case s.ckptSlots <- struct{}{}:
		default:
			s.mu.Unlock()
			return
		}
		if s.closing {
			<-s.ckptSlots
			break
		}
		s.goLocked(func() {
			defer func() { <-s.ckptSlots }()
			ctx, cancel := context.WithTimeout(s.life, checkpointTimeout)
			defer cancel()
			if err := s.checkpoint(ctx, lv); err != nil && !errors.Is(err, errCheckpointSkipped) {
				s.log.Warn().Err(err).Str("vm", lv.id).Msg("checkpoint")
			}
		})
	}
	s.mu.Unlock()
}

// errCheckpointSkipped is a scheduled checkpoint that another one, or the
// VM's end, is ahead of.
var errCheckpointSkipped = errors.New("vms: checkpoint skipped")

// checkpoint stores what changed in lv's tree since its last checkpoint as
// a new layer, or a full capture when a new chain is due, and records it.
func (s *Service) checkpoint(ctx context.Context, lv *liveVM) error {
	// Not a hold on the VM (lv.hold): a checkpoint is no use of the VM,
	// and must not keep an idle one from hibernating.
	lv.ckpt.run.Lock()
	defer lv.ckpt.run.Unlock()
	start := s.cfg.Now()
	lv.mu.Lock()
	if lv.ended || lv.hibernating {
		lv.mu.Unlock()
		return gateway.Wrap(gateway.CodeConflict, errCheckpointSkipped, "the VM is hibernating or ending")
	}
	c := &lv.ckpt
	c.last = start
	changes := images.Changes{Guest: c.guestHeld > 0 || c.guestGen != c.scannedGen || c.journalFull, Journal: c.journal}
	gen := c.guestGen
	c.journal, c.journalFull = nil, false
	lv.mu.Unlock()

	res, err := s.images.Checkpoint(ctx, c.chain, lv.vm, changes, func(ctx context.Context, layers []gateway.Checkpoint) ([]string, error) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
		defer cancel()
		return s.store.RecordCheckpoint(wctx, lv.id, layers, start)
	})
	lv.mu.Lock()
	switch {
	case err != nil:
		// A checkpoint that fails gives its journal back, for the next one.
		if res.Scanned {
			c.journalFull = true
		}
		c.journal = append(changes.Journal, c.journal...)
	case res.Scanned:
		c.scannedGen = gen
	}
	lv.mu.Unlock()
	if err != nil {
		return err
	}
	s.log.Debug().Str("vm", lv.id).Bool("full", res.Full).Bool("scanned", res.Scanned).Int("changed", res.Changed).
		Int("deleted", res.Deleted).Int64("bytes", res.Layer.Bytes).Dur("took", s.cfg.Now().Sub(start)).Msg("vm checkpointed")
	return nil
}

// dropCheckpoint removes the checkpoint of a VM that ended for good.
func (s *Service) dropCheckpoint(ctx context.Context, lv *liveVM) {
	if !lv.ckpt.chain.Drop() {
		return
	}
	dropped, err := s.store.DropCheckpoint(ctx, lv.id)
	if err != nil {
		s.log.Warn().Err(err).Str("vm", lv.id).Msg("drop the checkpoint of a disposed vm")
		return
	}
	for _, name := range dropped {
		s.images.Discard(name)
	}
}

// DefaultCheckpointSeconds is the checkpointSeconds of a VM created without
// one: the service's CheckpointInterval, or 0 when VMs cannot be
// checkpointed (no image store).
func (s *Service) DefaultCheckpointSeconds() int {
	if s.cfg.Images == nil {
		return 0
	}
	return int(s.cfg.CheckpointInterval / time.Second)
}

// checkpointEvery is the interval of a VM's checkpoints its spec gives.
func checkpointEvery(spec gateway.VMSpec) time.Duration {
	return time.Duration(spec.CheckpointSeconds) * time.Second
}
