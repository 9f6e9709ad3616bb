package agentos

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ProcessUsage is what the host's kernel says of a sidecar process: its
// resident memory and the CPU time it has used since it started.
//
// It is the only real source of a VM's memory and CPU time on the pinned
// engine (0.2.21), which runs every guest process of every VM as a V8
// isolate on a thread of the one sidecar process (the threads are named by
// their pool, not by VM). Measured: the guest's /proc answers VmRSS 0 and
// all-zero CPU times for every process, and a fixed MemTotal = MemFree;
// the engine's resource snapshot counts processes, descriptors and
// filesystem bytes but no memory or CPU; a guest's own
// process.memoryUsage() is real but covers that one process only. So
// these figures are a VM's own only when it has the sidecar to itself.
type ProcessUsage struct {
	// RSS is the resident memory in bytes (VmRSS).
	RSS int64
	// CPU is the user and system time the process has used.
	CPU time.Duration
}

// clockTick is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which is 100 on every architecture the engine ships for (x86-64 and
// arm64), so it is not read from sysconf (which would need cgo).
const clockTick = 10 * time.Millisecond

// Usage reads the sidecar process's memory and CPU time from the host's
// /proc: two small file reads, about 70 µs measured.
func (s *Sidecar) Usage() (ProcessUsage, error) {
	return procUsage(s.pid)
}

func procUsage(pid int) (ProcessUsage, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	stat, err := os.ReadFile(dir + "stat")
	if err != nil {
		return ProcessUsage{}, fmt.Errorf("agentos: usage of sidecar %d: %w", pid, err)
	}
	status, err := os.ReadFile(dir + "status")
	if err != nil {
		return ProcessUsage{}, fmt.Errorf("agentos: usage of sidecar %d: %w", pid, err)
	}
	cpu, err := parseProcStatCPU(stat)
	if err != nil {
		return ProcessUsage{}, fmt.Errorf("agentos: usage of sidecar %d: %w", pid, err)
	}
	rss, err := parseStatusRSS(status)
	if err != nil {
		return ProcessUsage{}, fmt.Errorf("agentos: usage of sidecar %d: %w", pid, err)
	}
	return ProcessUsage{RSS: rss, CPU: cpu}, nil
}

// parseProcStatCPU returns utime + stime of a /proc/<pid>/stat line. The
// command name, in parentheses, may hold spaces and parentheses itself, so
// the fields are counted from the last ')'.
func parseProcStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("no command name in /proc stat")
	}
	// After the name come state (field 3) ... utime (14) and stime (15).
	f := bytes.Fields(b[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat has %d fields after the name, want at least 13", len(f))
	}
	utime, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc stat CPU times: %w", err)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// parseStatusRSS returns VmRSS of a /proc/<pid>/status, in bytes.
func parseStatusRSS(b []byte) (int64, error) {
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("/proc status VmRSS %q", rest)
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc status VmRSS: %w", err)
		}
		return kb << 10, nil
	}
	// A zombie has no VmRSS line: it holds no memory.
	return 0, nil
}
