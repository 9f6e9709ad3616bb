package archive

import "io/fs"

// The permission bits beyond rwx, as a Unix mode (a tar header's, the
// engine's) spells them.
const (
	unixSetuid = 0o4000
	unixSetgid = 0o2000
	unixSticky = 0o1000
)

// PermFromUnix is the permission bits of the Unix mode m as an
// fs.FileMode: rwx and the setuid, setgid and sticky bits, which
// fs.FileMode keeps apart from Perm() (a VM's home directory is setgid,
// its /tmp sticky: an image that dropped them would change the VM).
func PermFromUnix(m uint32) fs.FileMode {
	perm := fs.FileMode(m & 0o777)
	if m&unixSetuid != 0 {
		perm |= fs.ModeSetuid
	}
	if m&unixSetgid != 0 {
		perm |= fs.ModeSetgid
	}
	if m&unixSticky != 0 {
		perm |= fs.ModeSticky
	}
	return perm
}

// UnixPerm is the Unix permission bits of m (a tar header's mode),
// PermFromUnix's inverse.
func UnixPerm(m fs.FileMode) int64 {
	perm := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		perm |= unixSetuid
	}
	if m&fs.ModeSetgid != 0 {
		perm |= unixSetgid
	}
	if m&fs.ModeSticky != 0 {
		perm |= unixSticky
	}
	return perm
}
