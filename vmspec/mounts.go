// Package vmspec checks what a VM is created with, before the engine sees
// it: the permission policy (into the engine's protocol.PermissionsPolicy),
// the engine limits by their shape, and mounts (the --mount-allow rules, the
// drivers offered, the guest paths that may be mounted over). It needs no
// Service and no live VM; vms asks it and applies the answers.
package vmspec

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
)

// MountDriver names a filesystem the engine can mount into a VM.
type MountDriver string

// The drivers the gateway offers. The engine (agentos-sidecar 0.2.21) has
// more: js_bridge (a filesystem the host implements call by call),
// chunked_s3, google_drive and sandbox_agent (remote stores reached with
// credentials), chunked_local and chunked_actor_sqlite (block stores in host
// files and the VM's database), module_access and agentos_packages (what
// the engine mounts itself). None of those is offered: each would let a
// tenant make the host reach a store or a file it names.
const (
	// DriverHostDir is a directory of the host, allowed by --mount-allow.
	DriverHostDir MountDriver = "host_dir"
	// DriverMemory is an empty filesystem in the VM's memory, gone with it.
	DriverMemory MountDriver = "memory"
)

// MountDrivers are the drivers a mount may name.
var MountDrivers = []MountDriver{DriverHostDir, DriverMemory}

// MaxMountsPerVM bounds the mounts one VM may have: each is resent to the
// engine with every change of the VM's configuration.
const MaxMountsPerVM = agentos.MaxMounts

// reservedGuestPaths may not be mounted over: the software the engine
// links lives in /opt/agentos, and /proc and /dev are the kernel's.
var reservedGuestPaths = []string{"/opt/agentos", "/proc", "/dev"}

// MountRule is a host directory tenants may mount (one entry of
// --mount-allow).
type MountRule struct {
	// Path is absolute, clean and free of symbolic links.
	Path string
	// ReadWrite allows read-write mounts; otherwise mounts are read-only.
	ReadWrite bool
}

// ParseMountAllow reads --mount-allow values: each is a comma-separated list
// of PATH, PATH:ro or PATH:rw (read-only unless :rw). Every PATH must be an
// absolute path of an existing host directory; it is resolved (symbolic
// links followed) now, so that what tenants ask for is compared with the
// directory itself. A path that itself ends in ":ro" or ":rw" or holds a
// comma cannot be given.
func ParseMountAllow(values []string) ([]MountRule, error) {
	var rules []MountRule
	for _, v := range values {
		for entry := range strings.SplitSeq(v, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			r := MountRule{Path: entry}
			if p, ok := strings.CutSuffix(entry, ":rw"); ok {
				r = MountRule{Path: p, ReadWrite: true}
			} else if p, ok := strings.CutSuffix(entry, ":ro"); ok {
				r.Path = p
			}
			if !filepath.IsAbs(r.Path) {
				return nil, fmt.Errorf("--mount-allow: %q is not an absolute path", r.Path)
			}
			resolved, err := filepath.EvalSymlinks(r.Path)
			if err != nil {
				return nil, fmt.Errorf("--mount-allow: %w", err)
			}
			if st, err := os.Stat(resolved); err != nil || !st.IsDir() {
				return nil, fmt.Errorf("--mount-allow: %s is not a directory", r.Path)
			}
			r.Path = resolved
			rules = append(rules, r)
		}
	}
	return rules, nil
}

// MatchMountRule returns the most specific rule whose directory is p or
// holds it; p must be absolute and clean.
func MatchMountRule(rules []MountRule, p string) (MountRule, bool) {
	var best MountRule
	found := false
	for _, r := range rules {
		if p != r.Path && !strings.HasPrefix(p, strings.TrimSuffix(r.Path, "/")+"/") {
			continue
		}
		if !found || len(r.Path) > len(best.Path) {
			best, found = r, true
		}
	}
	return best, found
}

// CheckGuestMountPath accepts an absolute, normalised guest path that is not
// the root nor in a reserved tree.
func CheckGuestMountPath(p string) error {
	switch {
	case p == "":
		return fieldError(gateway.CodeInvalidArgument, "path", "path is required: where the mount appears in the VM")
	case strings.ContainsRune(p, 0):
		return fieldError(gateway.CodeInvalidArgument, "path", "path must not contain NUL bytes")
	case len(p) > 1024:
		return fieldError(gateway.CodeInvalidArgument, "path", "path is longer than 1024 bytes")
	case !strings.HasPrefix(p, "/") || path.Clean(p) != p:
		return fieldError(gateway.CodeInvalidArgument, "path", "path must be absolute and normalised (no ., .. or trailing /)")
	case p == "/":
		return fieldError(gateway.CodeInvalidArgument, "path", "the VM's root cannot be mounted over")
	}
	for _, r := range reservedGuestPaths {
		if p == r || strings.HasPrefix(p, r+"/") {
			return fieldError(gateway.CodeInvalidArgument, "path", "%s is reserved for the engine and cannot be mounted over", r)
		}
	}
	return nil
}

// AllowHostDir resolves a host path a tenant asks for and finds the rule
// that allows it: the most specific directory of rules (--mount-allow) holding it
// once its symbolic links and .. are resolved. A path outside every rule is
// refused alike whether it exists or not, so that tenants cannot probe the
// host's filesystem.
func AllowHostDir(rules []MountRule, hostPath string) (string, MountRule, error) {
	switch {
	case len(rules) == 0:
		return "", MountRule{}, fieldError(gateway.CodePermissionDenied, "hostPath", "this gateway allows no host directory mounts (see --mount-allow)")
	case hostPath == "":
		return "", MountRule{}, fieldError(gateway.CodeInvalidArgument, "hostPath", "hostPath is required for a host_dir mount")
	case strings.ContainsRune(hostPath, 0):
		return "", MountRule{}, fieldError(gateway.CodeInvalidArgument, "hostPath", "hostPath must not contain NUL bytes")
	case !filepath.IsAbs(hostPath):
		return "", MountRule{}, fieldError(gateway.CodeInvalidArgument, "hostPath", "hostPath must be an absolute path")
	}
	outside := fieldError(gateway.CodePermissionDenied, "hostPath", "hostPath is outside the host directories this gateway allows")
	resolved, err := filepath.EvalSymlinks(hostPath)
	if err != nil {
		// Only a path whose existing part resolves within a rule may be
		// said not to exist: through a link, the missing part may lie
		// anywhere, and a .. after a link climbs from the link's target,
		// which cutting the path lexically would not follow.
		if slices.Contains(strings.Split(hostPath, "/"), "..") {
			return "", MountRule{}, outside
		}
		if _, ok := MatchMountRule(rules, resolveExisting(hostPath)); !ok {
			return "", MountRule{}, outside
		}
		return "", MountRule{}, fieldError(gateway.CodeInvalidArgument, "hostPath", "hostPath does not exist")
	}
	rule, ok := MatchMountRule(rules, resolved)
	if !ok {
		return "", MountRule{}, outside
	}
	if st, err := os.Stat(resolved); err != nil || !st.IsDir() {
		return "", MountRule{}, fieldError(gateway.CodeInvalidArgument, "hostPath", "hostPath is not a directory")
	}
	return resolved, rule, nil
}

// resolveExisting resolves the longest leading part of the absolute path p,
// which has no .. element, that exists and joins the rest to it: where p
// would be, were it created.
func resolveExisting(p string) string {
	rest := ""
	for dir := filepath.Clean(p); ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if dir == filepath.Dir(dir) {
			return filepath.Clean(p)
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// DriverList names the drivers a mount may name, for a refusal's words.
func DriverList() string {
	names := make([]string, len(MountDrivers))
	for i, d := range MountDrivers {
		names[i] = string(d)
	}
	return strings.Join(names, ", ")
}

// fieldError is a refusal naming the field of the request at fault.
func fieldError(code gateway.Code, field, format string, args ...any) error {
	return gateway.Errorf(code, format, args...).WithDetail("field", field)
}
