package api

import "time"

// FileWritten answers an uploaded file.
type FileWritten struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// ArchiveExtracted answers an uploaded archive: what was written under
// Path.
type ArchiveExtracted struct {
	Path     string `json:"path"`
	Files    int    `json:"files"`
	Dirs     int    `json:"dirs"`
	Symlinks int    `json:"symlinks"`
	Bytes    int64  `json:"bytes"`
}

// MkdirRequest is the body of POST /v1/vms/{vm}/dirs.
type MkdirRequest struct {
	Path string `json:"path" validate:"required,startswith=/,max=4096"`
}

// DirCreated answers a created directory.
type DirCreated struct {
	Path string `json:"path"`
}

// MoveRequest is the body of POST /v1/vms/{vm}/fs/move.
type MoveRequest struct {
	From string `json:"from" validate:"required,startswith=/,max=4096"`
	To   string `json:"to" validate:"required,startswith=/,max=4096"`
}

// Moved answers a move.
type Moved struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Stat is a file's metadata. ModTime is in UTC.
type Stat struct {
	Path      string    `json:"path"`
	Size      int64     `json:"size"`
	Mode      uint32    `json:"mode"`
	IsDir     bool      `json:"isDirectory"`
	IsSymlink bool      `json:"isSymbolicLink"`
	ModTime   time.Time `json:"mtime"`
	Uid       uint32    `json:"uid"`
	Gid       uint32    `json:"gid"`
}
