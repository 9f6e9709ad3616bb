// Package memtrim returns to the operating system the memory the Go
// runtime has freed but keeps, once the burst that needed it is over.
//
// A ramp of connections (thousands of SSE clients arriving at once) leaves
// the gateway with far more heap than it holds afterwards: every connection's
// handshake allocates read and write buffers and request state that are
// garbage as soon as its stream is taken over from net/http. The runtime
// frees that garbage only at its next collection, which an idle gateway may
// not run for two minutes, and its scavenger then returns the freed pages
// to the system gradually, keeping what its next heap goal could use. The
// kernel charges all of it to the gateway meanwhile, and the kernel's figure
// is the one a node is sized by. Run watches the runtime's own accounts and,
// once allocation has calmed after such a burst, collects and returns the
// memory at once (debug.FreeOSMemory). A busy gateway is left to the
// runtime: its collector runs often enough there, and a forced collection
// would only add work.
package memtrim

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/rs/zerolog"
)

// Config configures Run.
type Config struct {
	// Every is how often the runtime's accounts are read; a return happens
	// at most once per period.
	Every time.Duration
	// Log records each return: a rare event, after a burst.
	Log zerolog.Logger
}

// floor is the least slack worth a forced collection: below it, what the
// runtime keeps costs less than collecting it would, and than faulting the
// pages in again. The heartbeats of 15,000 idle SSE clients leave about
// 20 MiB each time (the stacks of the goroutines that wrote them), which
// the runtime's own collections take care of.
const floor = 64 << 20

// sample is what Run reads of the runtime's accounts.
type sample struct {
	allocs  uint64 // bytes allocated since the start, cumulative
	live    uint64 // heap objects marked live by the last collection
	objects uint64 // heap objects now, garbage not yet collected included
	free    uint64 // heap pages free and not returned to the system
	unused  uint64 // heap pages in use, minus the objects in them
	stacks  uint64 // heap memory reserved for goroutine stacks
}

var names = []string{
	"/gc/heap/allocs:bytes",
	"/gc/heap/live:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/stacks:bytes",
}

func read(s []metrics.Sample) sample {
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return sample{allocs: v(0), live: v(1), objects: v(2), free: v(3), unused: v(4), stacks: v(5)}
}

// slack is the memory the runtime keeps resident beyond what the program
// holds: pages it freed and kept, room in pages in use, and the garbage
// since the last collection.
func (s sample) slack() uint64 {
	garbage := uint64(0)
	if s.objects > s.live {
		garbage = s.objects - s.live
	}
	return s.free + s.unused + garbage
}

// trimmer decides, one sample a period, when to return memory.
type trimmer struct {
	prev sample
	// residual is the slack a return could not remove (room in pages that
	// stay in use, pages another goroutine took at once), lowered as the
	// runtime removes it itself, so that what cannot be returned does not
	// set off a return every period.
	residual uint64
}

// due reports whether s, a period after the sample before, calls for a
// return: the runtime keeps a quarter more than the program holds (and at
// least floor) beyond what the last return left, and allocation has calmed,
// so that the collector would not run soon by itself and what it would
// free is not about to be used again.
func (t *trimmer) due(s sample) bool {
	allocated := s.allocs - t.prev.allocs
	t.prev = s
	slack := s.slack()
	t.residual = min(t.residual, slack)
	excess := slack - t.residual
	return excess >= max(floor, (s.live+s.stacks)/4) && allocated < excess/8
}

// returned records the slack a return left.
func (t *trimmer) returned(s sample) {
	t.prev = s
	t.residual = s.slack()
}

// Run returns freed memory to the system after bursts, until ctx ends.
func Run(ctx context.Context, cfg Config) {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	var t trimmer
	t.prev = read(s)
	tick := time.NewTicker(cfg.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		before := read(s)
		if !t.due(before) {
			continue
		}
		start := time.Now()
		debug.FreeOSMemory()
		after := read(s)
		t.returned(after)
		cfg.Log.Info().Uint64("slack_before", before.slack()).Uint64("slack_after", after.slack()).
			Uint64("live", after.live).Uint64("stacks", after.stacks).Dur("took", time.Since(start)).Msg("returned freed memory to the system")
	}
}
