package soak

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/gatewayproc"
)

// gateway is the gateway binary the soak drives, run as a child process
// with a data directory and a TMPDIR of its own.
type gateway struct {
	*gatewayproc.Process
	url     string
	key     string // the admin key
	dataDir string
	tmpDir  string // the gateway's TMPDIR: every sidecar's lives under it
	logPath string
}

// startGateway runs bin on a free loopback port and waits until it is
// ready. The sidecar settings give several sidecars for a few VMs, so that
// killing one loses only some VMs, and retire idle sidecars quickly, so
// that the goroutine count can settle back to its baseline. One warm VM, not
// the default's four: the warm VMs refilled after each kill land on
// whichever sidecars have room, and a sidecar holding one is never idle, so
// four of them can keep more sidecars (each with goroutines of its own) than
// the baseline had, for good; one occupies one sidecar, as at the baseline.
func startGateway(ctx context.Context, bin, dir string, vmsPerSidecar, maxSidecars int) (*gateway, error) {
	g := &gateway{dataDir: filepath.Join(dir, "data"), tmpDir: filepath.Join(dir, "tmp"), logPath: filepath.Join(dir, "gateway.log")}
	for _, d := range []string{g.dataDir, g.tmpDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("soak: %w", err)
		}
	}
	key := make([]byte, 24)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("soak: admin key: %w", err)
	}
	g.key = "agk_soak_" + hex.EncodeToString(key)
	addr, err := gatewayproc.FreeAddr()
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	g.url = "http://" + addr
	g.Process, err = gatewayproc.Start(ctx, gatewayproc.Options{Bin: bin, Addr: addr, Log: g.logPath, Key: g.key,
		ReadyTimeout: 90 * time.Second,
		Args: []string{"--data-dir", g.dataDir,
			"--vms-per-sidecar", strconv.Itoa(vmsPerSidecar), "--max-sidecars", strconv.Itoa(maxSidecars),
			"--min-idle-sidecars", "1", "--sidecar-idle-timeout", "3s", "--shutdown-grace", "10s", "--warm-vms", "1"},
		Env: []string{"AGENTOS_GATEWAY_ADMIN_KEY=" + g.key, "TMPDIR=" + g.tmpDir}})
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	return g, nil
}

// pid is the gateway's process id.
func (g *gateway) pid() int { return g.PID() }

// stop sends SIGTERM and waits for the exit, then kills the gateway if it
// did not exit in time. It returns how the gateway ended: "0" for a clean
// exit.
func (g *gateway) stop(timeout time.Duration) string {
	if err := g.Stop(timeout); err != nil {
		return err.Error()
	}
	return "0"
}

// parentOf returns the parent pid of pid, or 0 when it is gone.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// procInfo is what leak detection reads of a process.
type procInfo struct {
	pid, pgid int
	state     string
	cmdline   string
	environ   []byte
}

func readProc(pid int) (procInfo, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return procInfo{}, false
	}
	p := procInfo{pid: pid, state: f[0]}
	p.pgid, _ = strconv.Atoi(f[2])
	cmd, _ := os.ReadFile(dir + "/cmdline")
	p.cmdline = strings.TrimSpace(string(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
	p.environ, _ = os.ReadFile(dir + "/environ")
	return p, true
}

// leakedProcesses walks /proc for the processes the gateway started that
// are still alive (zombies excluded): any whose process group is one of
// groups (the gateway's and every sidecar's seen), or whose environment
// has the gateway's private TMPDIR, which every sidecar and its children
// inherit.
func leakedProcesses(groups map[int]bool, tmpDir string) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return []string{"cannot read /proc: " + err.Error()}
	}
	marker := []byte("TMPDIR=" + tmpDir)
	self := os.Getpid()
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		p, ok := readProc(pid)
		if !ok || p.state == "Z" {
			continue
		}
		if groups[p.pgid] || hasEnv(p.environ, marker) {
			out = append(out, fmt.Sprintf("pid %d (group %d): %s", p.pid, p.pgid, p.cmdline))
		}
	}
	return out
}

// hasEnv reports whether environ (NUL-separated) has an entry that starts
// with prefix.
func hasEnv(environ, prefix []byte) bool {
	for len(environ) > 0 {
		entry, rest, _ := bytes.Cut(environ, []byte{0})
		if bytes.HasPrefix(entry, prefix) {
			return true
		}
		environ = rest
	}
	return false
}

// leakedTempFiles lists what the gateway left in its TMPDIR (every
// sidecar's private directory must be removed once it is reaped) and the
// temporary files left in its data directory (the store's and the
// sessions' databases are kept; SQLite's -wal and -shm files must be gone
// after a clean close, and nothing else may be there).
func leakedTempFiles(g *gateway) []string {
	var out []string
	entries, err := os.ReadDir(g.tmpDir)
	if err != nil {
		return []string{"cannot read " + g.tmpDir + ": " + err.Error()}
	}
	for _, e := range entries {
		out = append(out, filepath.Join(g.tmpDir, e.Name()))
	}
	_ = filepath.WalkDir(g.dataDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		name := d.Name()
		if strings.HasSuffix(name, ".db") {
			return nil
		}
		out = append(out, p)
		return nil
	})
	// A sidecar started with the soak's own TMPDIR, not the gateway's,
	// would leave its directory there, named after the gateway's pid.
	prefix := "agentos-sidecar-" + strconv.Itoa(g.pid()) + "-"
	if entries, err := os.ReadDir(os.TempDir()); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				out = append(out, filepath.Join(os.TempDir(), e.Name()))
			}
		}
	}
	return out
}

// goroutines reads go_goroutines from the gateway's /metrics.
func goroutines(ctx context.Context, admin *client.Client) (int, error) {
	b, err := admin.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	v, ok := metricValue(b, "go_goroutines")
	if !ok {
		return 0, errors.New("soak: /metrics has no go_goroutines")
	}
	return int(v), nil
}

// metricValue returns the value of an unlabelled sample of the
// Prometheus text format.
func metricValue(text []byte, name string) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		return v, err == nil
	}
	return 0, false
}
