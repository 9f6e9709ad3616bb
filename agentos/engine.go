package agentos

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Engine locates the pinned agentOS engine on the host: the sidecar binary and
// the npm folder that holds the software packages (.aospkg files) mounted into
// VMs. Nothing in it runs Node.js; npm is only the installer.
type Engine struct {
	// SidecarBin is the absolute path of the agentos-sidecar binary.
	SidecarBin string
	// PackagesDir is a node_modules folder holding @agentos-software/* packages.
	PackagesDir string
}

// EngineEnvBin and EngineEnvPackages name the environment variables that
// override where the engine is found.
const (
	EngineEnvBin      = "AGENTOS_SIDECAR_BIN"
	EngineEnvPackages = "AGENTOS_PACKAGES_DIR"
)

// engineRelDir is where `make setup` installs the engine, relative to the
// repository root.
const engineRelDir = "deps/agentos/node_modules"

const sidecarRelPath = "@rivet-dev/agentos-sidecar-linux-x64-gnu/agentos-sidecar"

// ErrEngineMissing reports that the sidecar binary or the software packages are
// not installed.
var ErrEngineMissing = errors.New("agentos engine not installed: run `make setup`")

// LocateEngine finds the engine: AGENTOS_SIDECAR_BIN and AGENTOS_PACKAGES_DIR
// when set, otherwise the folder `make setup` installs into, searched for from
// the working directory upwards (so tests and `go run` work from any package).
func LocateEngine() (Engine, error) {
	var e Engine
	dir := os.Getenv(EngineEnvPackages)
	if dir == "" {
		dir = findUp(engineRelDir)
	}
	e.PackagesDir = dir
	e.SidecarBin = os.Getenv(EngineEnvBin)
	if e.SidecarBin == "" && dir != "" {
		e.SidecarBin = filepath.Join(dir, sidecarRelPath)
	}
	if err := e.Check(); err != nil {
		return Engine{}, err
	}
	return e, nil
}

// Check verifies that the binary and the default software are present.
func (e Engine) Check() error {
	if e.SidecarBin == "" {
		return fmt.Errorf("%w (set %s or install into %s)", ErrEngineMissing, EngineEnvBin, engineRelDir)
	}
	if st, err := os.Stat(e.SidecarBin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%w: no executable sidecar at %s", ErrEngineMissing, e.SidecarBin)
	}
	if e.PackagesDir == "" {
		return fmt.Errorf("%w (set %s)", ErrEngineMissing, EngineEnvPackages)
	}
	for _, p := range DefaultSoftware {
		if _, err := os.Stat(e.PackagePath(p)); err != nil {
			return fmt.Errorf("%w: software package %s missing under %s", ErrEngineMissing, p, e.PackagesDir)
		}
	}
	return nil
}

// PackagePath returns the host path of the .aospkg file of an npm software
// package such as "@agentos-software/coreutils".
func (e Engine) PackagePath(npmName string) string {
	return filepath.Join(e.PackagesDir, filepath.FromSlash(npmName), "dist", "package.aospkg")
}

// Installed reports whether the npm software package npmName (such as
// "@agentos-software/pi") is installed: its .aospkg file is there.
func (e Engine) Installed(npmName string) bool {
	st, err := os.Stat(e.PackagePath(npmName))
	return err == nil && st.Mode().IsRegular()
}

// DefaultSoftware is what @agentos-software/common expands to, in the order the
// official SDK mounts it.
var DefaultSoftware = []string{
	"@agentos-software/coreutils",
	"@agentos-software/sed",
	"@agentos-software/grep",
	"@agentos-software/gawk",
	"@agentos-software/findutils",
	"@agentos-software/diffutils",
	"@agentos-software/tar",
	"@agentos-software/gzip",
}

// AgentPackages maps the ACP agent ids to the npm packages that provide them.
var AgentPackages = map[string]string{
	"pi":       "@agentos-software/pi",
	"claude":   "@agentos-software/claude-code",
	"codex":    "@agentos-software/codex-cli",
	"opencode": "@agentos-software/opencode",
}

func findUp(rel string) string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		cand := filepath.Join(dir, rel)
		if st, err := os.Stat(cand); err == nil && st.IsDir() {
			return cand
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
