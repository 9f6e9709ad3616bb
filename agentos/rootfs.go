package agentos

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// SnapshotFrameBytes is what one snapshot frame of the pinned engine
// carries. Measured on 0.2.21 (TestSnapshotFrameLimit): the sidecar refuses
// to send a response frame larger than 8 MiB (its "stdio terminal response
// egress", ERR_AGENTOS_TERMINAL_RESPONSE_LIMIT), so a root filesystem whose
// export is larger cannot be exported in one SnapshotRootFilesystemRequest;
// a CreateVmRequest carrying a snapshot lower of 10 MiB was accepted, so the
// same bound serves the way back. Larger trees move in chunked file calls.
const SnapshotFrameBytes = 8 << 20

// snapshotExportBudget is the maxBytes of an export: the engine counts its
// own encoding of the entries (larger than the frame's: measured 282,306
// bytes for a 197 KB frame), so a budget below the frame limit refuses
// every export that would not fit before it is attempted.
const snapshotExportBudget = SnapshotFrameBytes - 64<<10

// ErrSnapshotTooLarge means a root filesystem does not fit one snapshot
// frame: export it with file calls instead.
var ErrSnapshotTooLarge = errors.New("agentos: root filesystem larger than one snapshot frame")

// engineResponseLimit is the engine's refusal of a response over its frame
// limit.
const engineResponseLimit EngineCode = "ERR_AGENTOS_TERMINAL_RESPONSE_LIMIT"

// ExportRootFilesystemFrame exports the VM's root filesystem in one
// snapshot frame, or returns ErrSnapshotTooLarge when it does not fit one.
func (vm *VM) ExportRootFilesystemFrame(ctx context.Context) ([]protocol.RootFilesystemEntry, error) {
	es, err := vm.ExportRootFilesystem(ctx, snapshotExportBudget)
	var rej *RejectedError
	if errors.As(err, &rej) && (rej.Errno == "EFBIG" || isResponseLimit(rej)) {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotTooLarge, err)
	}
	return es, err
}

// isResponseLimit reports whether the engine refused to send a response
// over its frame limit: it names the condition as the rejection's code.
func isResponseLimit(rej *RejectedError) bool {
	return rej.Code == string(engineResponseLimit) || rej.EngineCode == engineResponseLimit
}

// rootEntryJSON is a RootFilesystemEntry as the CreateVmRequest config
// spells it (the JSON form of the BARE struct).
type rootEntryJSON struct {
	Path       string  `json:"path"`
	Kind       string  `json:"kind"`
	Mode       *uint32 `json:"mode,omitempty"`
	UID        *uint32 `json:"uid,omitempty"`
	GID        *uint32 `json:"gid,omitempty"`
	Content    *string `json:"content,omitempty"`
	Encoding   string  `json:"encoding,omitempty"`
	Target     *string `json:"target,omitempty"`
	Executable bool    `json:"executable"`
}

// snapshotLowerJSON is the config's RootFilesystemLowerDescriptor of kind
// snapshot.
type snapshotLowerJSON struct {
	Kind    string          `json:"kind"`
	Entries []rootEntryJSON `json:"entries"`
}

func rootEntriesJSON(es []protocol.RootFilesystemEntry) []rootEntryJSON {
	out := make([]rootEntryJSON, len(es))
	for i, e := range es {
		j := rootEntryJSON{Path: e.Path, Mode: e.Mode, UID: e.UID, GID: e.GID, Content: e.Content, Target: e.Target, Executable: e.Executable}
		switch e.Kind {
		case protocol.RootFilesystemEntryKindDirectory:
			j.Kind = "directory"
		case protocol.RootFilesystemEntryKindSymlink:
			j.Kind = "symlink"
		default:
			j.Kind = "file"
		}
		if e.Encoding != nil {
			if *e.Encoding == protocol.RootFilesystemEntryEncodingBase64 {
				j.Encoding = "base64"
			} else {
				j.Encoding = "utf8"
			}
		}
		out[i] = j
	}
	return out
}

// EncodeContent is the content of a RootFilesystemEntry for data: UTF-8
// text when it is valid UTF-8, base64 otherwise.
func EncodeContent(data []byte) (string, *protocol.RootFilesystemEntryEncoding) {
	s, enc := encodeContent(data)
	if enc == nil {
		u := protocol.RootFilesystemEntryEncodingUTF8
		enc = &u
	}
	return s, enc
}

// DecodeContent returns the bytes of a RootFilesystemEntry's content.
func DecodeContent(e protocol.RootFilesystemEntry) ([]byte, error) {
	var out []byte
	err := decodeContent(protocol.GuestFilesystemResultResponse{Content: e.Content, Encoding: e.Encoding}, func(b []byte) error {
		// b may be a pooled buffer or a view of the entry's string: the
		// caller keeps the bytes, so they are copied.
		out = append([]byte{}, b...)
		return nil
	})
	return out, err
}
