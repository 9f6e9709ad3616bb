// Package durability is the gateway's model-checked fault run: random
// sequences of file changes (through the files API and through the VM's
// own commands) and faults (hibernations woken by each kind of call,
// checkpoints and sidecar SIGKILLs, gateway restarts, drains to another
// node) against a real gateway binary, each sequence with a model of the
// VM's whole tree. After every step that brings the VM back, the tree the
// gateway serves is compared with the model, file by file (paths, modes,
// bytes); the first difference stops the run with the sequence's seed, its
// steps and both trees.
//
// A sequence's steps follow from its seed alone (the generator reads only
// its random source and the model), so a failing seed replays: Config.Seeds.
package durability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/mockanthropic"
)

// Config says what a run does.
type Config struct {
	// GatewayBin is the gateway binary (go build ./cmd/server).
	GatewayBin string
	// Dir holds the gateways' data directories, TMPDIRs and logs, and the
	// trees of a failing sequence.
	Dir string
	// Postgres, when set, is a database URL the run's two nodes share
	// (it should be a database of its own); empty runs one node on SQLite.
	Postgres string
	// Sequences and Steps: how many sequences, of how many steps each.
	Sequences, Steps int
	// Seed is the first sequence's seed; sequence i has Seed+i. Seeds,
	// when set, replaces them (a failing seed's regression test).
	Seed  uint64
	Seeds []uint64
	// Parallel is how many sequences run at once, each with a VM.
	Parallel int
	// Progress, when set, gets a line per finished sequence.
	Progress io.Writer

	// script, when set, is every sequence's steps (a test's fixed
	// sequence), in place of the generator's.
	script []step
}

// Report is what a run did.
type Report struct {
	Store       string        `json:"store"` // "sqlite" or "postgres (2 nodes)"
	Sequences   int           `json:"sequences"`
	Steps       int           `json:"steps"`
	ByKind      map[Kind]int  `json:"byKind"`
	WokenBy     map[Waker]int `json:"wokenBy"`
	Faults      int           `json:"faults"` // hibernations, sidecar kills, restarts, drains
	Comparisons int           `json:"comparisons"`
	Compared    int64         `json:"entriesCompared"`
	Differences int           `json:"differences"`
	Duration    time.Duration `json:"duration"`
	Failure     string        `json:"failure,omitempty"`
	mu          sync.Mutex
}

func (r *Report) add(f func(r *Report)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// Print writes the report as the text of docs/durability.md's table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "store %s: %d sequences, %d steps, %d faults injected, %d comparisons of the whole tree, %d entries compared, %d differences, in %s\n",
		r.Store, r.Sequences, r.Steps, r.Faults, r.Comparisons, r.Compared, r.Differences, r.Duration.Round(time.Second))
	fmt.Fprintf(w, "  steps by kind: %v\n  woken by: %v\n", r.ByKind, r.WokenBy)
}

// Failed is the first difference, or a step the gateway refused.
type Failed struct {
	Seed  uint64
	Steps []string
	Err   error
}

func (f *Failed) Error() string {
	return fmt.Sprintf("durability: sequence of seed %d failed at step %d: %v\nsteps:\n  %s",
		f.Seed, len(f.Steps), f.Err, strings.Join(f.Steps, "\n  "))
}

func (f *Failed) Unwrap() error { return f.Err }

// world is the gateway the sequences share: its nodes, an admin client
// per node, the tenant's clients and the mock model for sessions. Steps
// that stop a gateway (restarts, drains) hold it exclusively; all other
// steps share it.
type world struct {
	cfg    Config
	nodes  []*proc
	admins []*client.Client
	users  []*client.Client
	mock   *mockanthropic.Server
	hc     *http.Client
	mu     sync.RWMutex
	rep    *Report
}

// slowStep is a step's time past which the progress says so.
const slowStep = 20 * time.Second

// stepTimeout bounds one step: a call, or a wake after a restart.
const stepTimeout = 3 * time.Minute

// Run runs the sequences and reports. An error that is a *Failed is a
// difference or a refused step; any other is a run that could not start.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	seeds := cfg.Seeds
	if len(seeds) == 0 {
		for i := range cfg.Sequences {
			seeds = append(seeds, cfg.Seed+uint64(i))
		}
	}
	rep := &Report{Store: "sqlite", ByKind: map[Kind]int{}, WokenBy: map[Waker]int{}}
	w := &world{cfg: cfg, rep: rep}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	w.hc = &http.Client{Transport: tr}
	count := 1
	if cfg.Postgres != "" {
		count = 2
		rep.Store = "postgres (2 nodes)"
	}
	defer w.stopAll()
	for i := range count {
		n, err := newProc(cfg.GatewayBin, filepath.Join(cfg.Dir, fmt.Sprintf("n%d", i+1)), fmt.Sprintf("n%d", i+1), cfg.Postgres, cfg.Parallel)
		if err != nil {
			return nil, err
		}
		if err := n.start(ctx); err != nil {
			return nil, err
		}
		w.nodes = append(w.nodes, n)
		admin, err := client.New(n.url, adminKey, client.WithHTTPClient(w.hc))
		if err != nil {
			return nil, err
		}
		w.admins = append(w.admins, admin)
	}
	mock, err := mockanthropic.Listen()
	if err != nil {
		return nil, err
	}
	defer mock.Close()
	w.mock = mock
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	tn, err := w.admins[0].CreateTenant(sctx, client.TenantCreate{Name: "durability"})
	var key *client.APIKey
	if err == nil {
		key, err = w.admins[0].CreateKey(sctx, tn.ID)
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("durability: tenant: %w", err)
	}
	for _, n := range w.nodes {
		c, err := client.New(n.url, key.Key, client.WithHTTPClient(w.hc))
		if err != nil {
			return nil, err
		}
		w.users = append(w.users, c)
	}

	began := time.Now()
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg      sync.WaitGroup
		next    atomic.Int64
		failMu  sync.Mutex
		failure error
	)
	for range min(cfg.Parallel, len(seeds)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(seeds) {
					return
				}
				err := w.sequence(ctx, seeds[i])
				if err != nil {
					failMu.Lock()
					if failure == nil && (ctx.Err() == nil || errors.As(err, new(*Failed))) {
						failure = err
					}
					failMu.Unlock()
					stop()
					return
				}
				rep.add(func(r *Report) { r.Sequences++ })
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "durability: sequence %d of %d (seed %d) passed, %s\n", i+1, len(seeds), seeds[i], time.Since(began).Round(time.Second))
				}
			}
		}()
	}
	wg.Wait()
	rep.Duration = time.Since(began)
	if failure == nil && ctx.Err() != nil {
		failure = ctx.Err()
	}
	if failure != nil {
		rep.Failure = failure.Error()
		return rep, failure
	}
	return rep, nil
}

// stopAll stops every node that still runs.
func (w *world) stopAll() {
	var wg sync.WaitGroup
	for _, n := range w.nodes {
		if n.running() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = n.stop(2 * time.Minute)
			}()
		}
	}
	wg.Wait()
}

// sequence is one sequence: a VM, the model of its tree, its steps.
type sequence struct {
	w     *world
	seed  uint64
	gen   *generator
	vm    string
	model tree
	// checkpoint is the model as of the VM's last checkpoint.
	checkpoint tree
	steps      []string
	turn       int // picks the node of the next call
}

// user is the tenant's client through one of the nodes, in turn: on a
// cluster, a call reaches the VM's node directly or through the other.
func (q *sequence) user() *client.VMHandle {
	q.turn++
	return q.w.users[q.turn%len(q.w.users)].VM(q.vm)
}

func (w *world) sequence(ctx context.Context, seed uint64) (err error) {
	q := &sequence{w: w, seed: seed, gen: newGenerator(seed, len(w.nodes) > 1, true)}
	fail := func(err error) error { return &Failed{Seed: seed, Steps: q.steps, Err: err} }
	err = q.within(ctx, func(ctx context.Context) error {
		// With pi, so that a session can wake it.
		vm, err := w.users[0].CreateVM(ctx, client.CreateVMRequest{Agents: []string{"pi"}})
		if err != nil {
			return err
		}
		q.vm = vm.ID
		q.model, err = q.download(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("durability: seed %d: a VM: %w", seed, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stepTimeout)
		defer cancel()
		w.mu.RLock()
		defer w.mu.RUnlock()
		if _, derr := w.users[0].VM(q.vm).Delete(dctx); derr != nil && err == nil {
			err = fmt.Errorf("durability: seed %d: delete the VM: %w", seed, derr)
		}
	}()
	n := w.cfg.Steps
	if w.cfg.script != nil {
		n = len(w.cfg.script)
	}
	for i := range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var s step
		if w.cfg.script != nil {
			s = w.cfg.script[i]
		} else {
			s = q.gen.next(q.model)
		}
		q.steps = append(q.steps, s.String())
		began := time.Now()
		err := q.run(ctx, s)
		if d := time.Since(began); w.cfg.Progress != nil && d > slowStep {
			fmt.Fprintf(w.cfg.Progress, "durability: seed %d: step %d (%s) took %s\n", seed, i+1, s, d.Round(time.Millisecond))
		}
		if err != nil {
			if ctx.Err() != nil && !errors.As(err, new(*diffError)) {
				return ctx.Err()
			}
			return fail(err)
		}
		w.rep.add(func(r *Report) {
			r.Steps++
			r.ByKind[s.kind]++
			if s.wakes() {
				r.Faults++
				if s.wake != "" {
					r.WokenBy[s.wake]++
				}
			}
		})
	}
	// The end: the tree once more, as it is.
	return q.within(ctx, func(ctx context.Context) error {
		if err := q.compare(ctx, "the end"); err != nil {
			return fail(err)
		}
		return nil
	})
}

// within runs fn with a context of its own for one step, sharing the
// world.
func (q *sequence) within(ctx context.Context, fn func(ctx context.Context) error) error {
	q.w.mu.RLock()
	defer q.w.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return fn(ctx)
}

// exclusive runs fn with a context of its own, alone in the world.
func (q *sequence) exclusive(ctx context.Context, fn func(ctx context.Context) error) error {
	q.w.mu.Lock()
	defer q.w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*stepTimeout)
	defer cancel()
	return fn(ctx)
}

// run runs s against the gateway and, once it succeeded, applies it to the
// model; a step that brings the VM back is followed by a comparison.
func (q *sequence) run(ctx context.Context, s step) error {
	var err error
	switch s.kind {
	case Restart, Drain:
		err = q.exclusive(ctx, func(ctx context.Context) error { return q.fault(ctx, s) })
	default:
		err = q.within(ctx, func(ctx context.Context) error { return q.call(ctx, s) })
	}
	if err != nil {
		return err
	}
	if err := s.apply(q.model); err != nil {
		return err
	}
	switch s.kind {
	case Checkpoint:
		q.checkpoint = q.model.clone()
	case KillSidecar:
		// What came after the checkpoint is gone, as the README says.
		q.model, q.checkpoint = q.checkpoint.clone(), nil
	}
	if s.wakes() {
		return q.within(ctx, func(ctx context.Context) error { return q.compare(ctx, s.String()) })
	}
	return nil
}

// call makes the gateway calls of a step that does not stop a gateway.
func (q *sequence) call(ctx context.Context, s step) error {
	vm := q.user()
	switch s.kind {
	case APIWrite:
		_, err := vm.WriteFile(ctx, s.path, bytes.NewReader(s.data), client.WriteFileOptions{})
		return err
	case APIMkdirs:
		return vm.Mkdir(ctx, s.path)
	case APIArchive:
		b, err := s.tarOf()
		if err != nil {
			return err
		}
		_, err = vm.UploadArchive(ctx, s.path, bytes.NewReader(b), client.ArchiveOptions{})
		return err
	case APIDelete:
		return vm.DeleteFile(ctx, s.path, client.DeleteFileOptions{Recursive: true})
	case APIMove:
		return vm.Move(ctx, s.path, s.to)
	case GuestWrite, GuestAppend, GuestRemove, GuestMove, GuestMkdir, GuestRead:
		r, err := vm.Exec(ctx, client.ExecRequest{Command: s.cmd})
		if err != nil {
			return err
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("%s exited %d: %s", s.cmd, r.ExitCode, r.Stderr)
		}
		return nil
	case Hibernate:
		if _, err := vm.Hibernate(ctx); err != nil {
			return err
		}
		return q.wake(ctx, s.wake)
	case Checkpoint:
		_, err := vm.Checkpoint(ctx)
		return err
	case KillSidecar:
		return q.killSidecar(ctx)
	}
	return fmt.Errorf("durability: no call for %s", s.kind)
}

// wake brings a hibernated VM back with the call by.
func (q *sequence) wake(ctx context.Context, by Waker) error {
	vm := q.user()
	switch by {
	case WakeExec:
		_, err := vm.Exec(ctx, client.ExecRequest{Command: "true"})
		return err
	case WakeFiles:
		_, err := vm.Stat(ctx, workspace)
		return err
	case WakeShell:
		sh, err := vm.OpenShell(ctx, client.ShellRequest{})
		if err != nil {
			return err
		}
		return sh.Close(ctx)
	case WakeSession:
		s, err := vm.OpenSession(ctx, client.OpenSessionRequest{Agent: "pi", Env: q.w.mock.Env()})
		if err != nil {
			return err
		}
		return vm.Session(s.ID).Delete(ctx)
	case WakeCall:
		_, err := vm.Wake(ctx)
		return err
	}
	return fmt.Errorf("durability: no waker %q", by)
}

// killSidecar SIGKILLs the sidecar that runs the VM (it runs no other:
// --vms-per-sidecar 1), waits until the gateway counts the VM lost and
// restorable, and restores it.
func (q *sequence) killSidecar(ctx context.Context) error {
	vm, err := q.w.users[0].VM(q.vm).Get(ctx)
	if err != nil {
		return err
	}
	if vm.SidecarID == "" {
		return fmt.Errorf("the VM (%s) has no sidecar", vm.State)
	}
	// Sidecar ids are a node's own (each node has an sc-1): the VM's
	// sidecar is looked up on the node that runs it.
	pid := 0
	for i, a := range q.w.admins {
		if len(q.w.nodes) > 1 && q.w.nodes[i].id != vm.Node {
			continue
		}
		scs, err := a.Sidecars(ctx)
		if err != nil {
			return err
		}
		for _, sc := range scs {
			if sc.ID == vm.SidecarID {
				pid = sc.Pid
			}
		}
		if pid != 0 {
			break
		}
	}
	if pid == 0 {
		return fmt.Errorf("the VM's sidecar %s is not listed", vm.SidecarID)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill the sidecar %d: %w", pid, err)
	}
	for {
		vm, err := q.w.users[0].VM(q.vm).Get(ctx)
		if err != nil {
			return err
		}
		if vm.State == "lost" {
			if !vm.Restorable {
				return fmt.Errorf("the VM is lost and not restorable after a checkpoint")
			}
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the VM is %s, not lost, after its sidecar's SIGKILL: %w", vm.State, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, err = q.user().Wake(ctx)
	return err
}

// fault restarts a gateway node, or drains the VM's node and starts it
// again, then wakes the VM.
func (q *sequence) fault(ctx context.Context, s step) error {
	vm, err := q.w.users[0].VM(q.vm).Get(ctx)
	if err != nil {
		return err
	}
	n := q.w.nodes[0]
	for _, m := range q.w.nodes {
		if m.id == vm.Node {
			n = m
		}
	}
	switch s.kind {
	case Restart:
		if err := n.stop(2 * time.Minute); err != nil {
			return err
		}
	case Drain:
		// Asked through the other node, as an operator's script would.
		other := q.w.nodes[0]
		if n == other {
			other = q.w.nodes[1]
		}
		if err := q.w.drain(ctx, other, n.id); err != nil {
			return err
		}
		if err := n.wait(2 * time.Minute); err != nil {
			return err
		}
	}
	if err := n.start(ctx); err != nil {
		return err
	}
	return q.wake(ctx, s.wake)
}

// drain asks through via for the drain of the node nodeID. The Go client
// has no method for the nodes' routes, which are an operator's.
func (w *world) drain(ctx context.Context, via *proc, nodeID string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, via.url+"/v1/nodes/"+nodeID+"/drain", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := w.hc.Do(req)
	if err != nil {
		return fmt.Errorf("drain %s: %w", nodeID, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("drain %s: %s %s", nodeID, resp.Status, b)
	}
	return nil
}

// download reads the VM's whole tree: an archive of each directory at the
// root but the excluded (an archive of / would hold the packages' tens of
// megabytes), and the root's other entries one by one.
func (q *sequence) download(ctx context.Context) (tree, error) {
	vm := q.user()
	es, err := vm.ListDir(ctx, "/", client.ListDirOptions{})
	if err != nil {
		return nil, err
	}
	t := tree{}
	for _, e := range es {
		p := path.Join("/", e.Name)
		if isExcluded(p) {
			continue
		}
		st, err := vm.Stat(ctx, p)
		if err != nil {
			return nil, err
		}
		mode := fs.FileMode(st.Mode).Perm()
		switch {
		case st.IsSymlink:
			t[p] = entry{kind: 'l'}
		case st.IsDir:
			t[p] = entry{kind: 'd', mode: mode}
			rc, err := vm.DownloadArchive(ctx, p, client.ArchiveOptions{})
			if err != nil {
				return nil, err
			}
			err = readTree(rc, p, t)
			rc.Close()
			if err != nil {
				return nil, err
			}
		default:
			rc, err := vm.ReadFile(ctx, p)
			if err != nil {
				return nil, err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return nil, err
			}
			t[p] = entry{kind: 'f', mode: mode, data: b}
		}
	}
	return t, nil
}

// diffError is a difference between the VM's tree and the model.
type diffError struct {
	after string
	lines []string
	files [2]string // the two trees, written out
}

func (e *diffError) Error() string {
	shown := e.lines[:min(len(e.lines), 20)]
	return fmt.Sprintf("after %s the VM's tree differs from the model in %d entries:\n  %s\n(the model: %s, the VM: %s)",
		e.after, len(e.lines), strings.Join(shown, "\n  "), e.files[0], e.files[1])
}

// compare downloads the tree and compares it with the model.
func (q *sequence) compare(ctx context.Context, after string) error {
	got, err := q.download(ctx)
	if err != nil {
		return err
	}
	d := diff(q.model, got)
	q.w.rep.add(func(r *Report) {
		r.Comparisons++
		r.Compared += int64(len(q.model))
		r.Differences += len(d)
	})
	if len(d) == 0 {
		return nil
	}
	e := &diffError{after: after, lines: d}
	for i, t := range []tree{q.model, got} {
		name := filepath.Join(q.w.cfg.Dir, fmt.Sprintf("seed-%d-%s.txt", q.seed, []string{"model", "vm"}[i]))
		if err := os.WriteFile(name, []byte(t.String()), 0o644); err == nil {
			e.files[i] = name
		}
	}
	return e
}
