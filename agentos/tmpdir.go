package agentos

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// tempDirPrefix names a sidecar's private temporary directory, followed by
// the pid of the process that started the sidecar: the directories of a
// process that died without removing them (SIGKILL takes its sidecars down
// through Pdeathsig, but leaves their files) can then be told apart from
// those of live processes and swept.
const tempDirPrefix = "agentos-sidecar-"

// swept records the parents already swept by this process.
var swept sync.Map

// makeTempDir makes a sidecar's private temporary directory under parent
// (os.TempDir() when empty), sweeping the leftovers of dead processes the
// first time this process uses parent.
func makeTempDir(parent string) (string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	if _, done := swept.LoadOrStore(parent, true); !done {
		sweepTempDirs(parent)
	}
	return os.MkdirTemp(parent, tempDirPrefix+strconv.Itoa(os.Getpid())+"-")
}

// sweepTempDirs removes the sidecar directories under parent whose owning
// process no longer exists. A directory of a live process, or of a pid
// reused since, is kept: sweeping errs on the side of leaving files.
func sweepTempDirs(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), tempDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		digits, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(digits)
		if !ok || err != nil || pid <= 0 || pid == self || processExists(pid) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(parent, e.Name()))
	}
}

// processExists reports whether a process with this pid exists (one of
// another user's answers EPERM).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
