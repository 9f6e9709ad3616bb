package gateway

import "time"

// SidecarInfo describes one pooled sidecar, as the sidecar pool reports
// it to operators (api.Sidecar is its wire shape).
type SidecarInfo struct {
	ID    string
	Pid   int // 0 while starting
	State string
	Holds int
	// Tenants are the tenants holding leases on the sidecar, sorted.
	Tenants []string
	// Isolated sidecars serve only Owner, the tenant they were spawned for.
	Isolated  bool
	Owner     string
	RSS       int64
	StartedAt time.Time
}

// SidecarPoolStats are the sidecar pool's counters and current sizes.
type SidecarPoolStats struct {
	Spawned       uint64 // sidecars that completed their handshake
	SpawnFailures uint64 // spawns or handshakes that failed
	Crashes       uint64 // sidecars that died without being asked to
	Restarts      uint64 // successful spawns that replaced a crashed sidecar
	Retired       uint64 // sidecars stopped for being idle or over the memory high-water
	// SharedPlacements counts holds that TenantAffinity put on a sidecar
	// holding another tenant's VMs, for want of room for one of its own.
	SharedPlacements uint64
	Live             int // sidecars counted against MaxSidecars, in any state
	Idle             int // ready sidecars with no holds
}
