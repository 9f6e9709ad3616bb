package agentmcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// maxReadFile bounds read_file: its answer goes into a model's context.
const maxReadFile = 1 << 20

// The encodings of a file's content.
const (
	encodingUTF8   = "utf-8"
	encodingBase64 = "base64"
)

// PathInput names a file of a VM.
type PathInput struct {
	VM   string `json:"vm" jsonschema:"the VM's id"`
	Path string `json:"path" jsonschema:"an absolute path in the VM"`
}

// FileContent is read_file's output.
type FileContent struct {
	Path     string `json:"path"`
	Content  string `json:"content" jsonschema:"the file's content, as encoding says"`
	Encoding string `json:"encoding" jsonschema:"utf-8 for text, base64 for a file that is not valid UTF-8"`
	Size     int    `json:"size" jsonschema:"the file's size in bytes"`
}

// WriteFileInput is write_file's input.
type WriteFileInput struct {
	VM       string `json:"vm" jsonschema:"the VM's id"`
	Path     string `json:"path" jsonschema:"an absolute path in the VM"`
	Content  string `json:"content" jsonschema:"the file's new content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64"`
	Mkdirs   bool   `json:"mkdirs,omitempty" jsonschema:"create the missing parent directories"`
}

// FileWritten is write_file's output.
type FileWritten struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// ListFilesInput is list_files's input.
type ListFilesInput struct {
	VM        string `json:"vm" jsonschema:"the VM's id"`
	Path      string `json:"path" jsonschema:"an absolute path of a directory in the VM"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"descend into subdirectories"`
}

// Entry is a directory entry.
type Entry struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	IsDir     bool   `json:"isDirectory"`
	IsSymlink bool   `json:"isSymbolicLink,omitempty"`
	Size      int64  `json:"size"`
}

// Entries is list_files's output.
type Entries struct {
	Entries []Entry `json:"entries"`
}

// DeleteFileInput is delete_file's input.
type DeleteFileInput struct {
	VM        string `json:"vm" jsonschema:"the VM's id"`
	Path      string `json:"path" jsonschema:"an absolute path in the VM"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"remove a directory with its content"`
}

// Deleted is delete_file's output.
type Deleted struct {
	Path    string `json:"path"`
	Deleted bool   `json:"deleted"`
}

func (t *tools) addFileTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Title: "Read a file",
		Description: "Returns a file of a VM, at most 1 MiB of it: text as it is, other bytes in base64.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in PathInput) (FileContent, error) {
			body, err := t.c.VM(in.VM).ReadFile(ctx, in.Path)
			if err != nil {
				return FileContent{}, err
			}
			defer body.Close()
			b, err := io.ReadAll(io.LimitReader(body, maxReadFile+1))
			if err != nil {
				return FileContent{}, fmt.Errorf("read %s: %w", in.Path, err)
			}
			if len(b) > maxReadFile {
				return FileContent{}, fmt.Errorf("%s is larger than read_file's %d bytes; read a part with exec (head, tail, sed -n)", in.Path, maxReadFile)
			}
			out := FileContent{Path: in.Path, Content: string(b), Encoding: encodingUTF8, Size: len(b)}
			if !utf8.Valid(b) {
				out.Content, out.Encoding = base64.StdEncoding.EncodeToString(b), encodingBase64
			}
			return out, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Title: "Write a file",
		Description: "Creates or replaces a file of a VM with the content given.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in WriteFileInput) (FileWritten, error) {
			var data []byte
			switch in.Encoding {
			case "", encodingUTF8:
				data = []byte(in.Content)
			case encodingBase64:
				var err error
				if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
					return FileWritten{}, fmt.Errorf("content is not base64: %w", err)
				}
			default:
				return FileWritten{}, fmt.Errorf("encoding %q is neither %s nor %s", in.Encoding, encodingUTF8, encodingBase64)
			}
			return answer(func(res *client.WriteResult) FileWritten { return FileWritten{Path: res.Path, Size: res.Size} })(
				t.c.VM(in.VM).WriteFile(ctx, in.Path, bytes.NewReader(data), client.WriteFileOptions{Mkdirs: in.Mkdirs}))
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "list_files", Title: "List a directory",
		Description: "Lists a directory of a VM (recursive: with its subdirectories).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in ListFilesInput) (Entries, error) {
			return answer(entries)(t.c.VM(in.VM).ListDir(ctx, in.Path, client.ListDirOptions{Recursive: in.Recursive}))
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "delete_file", Title: "Delete a file",
		Description: "Removes a file of a VM, or a directory (recursive: with its content).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in DeleteFileInput) (Deleted, error) {
			if err := t.c.VM(in.VM).DeleteFile(ctx, in.Path, client.DeleteFileOptions{Recursive: in.Recursive}); err != nil {
				return Deleted{}, err
			}
			return Deleted{Path: in.Path, Deleted: true}, nil
		}))
}

// entries is a directory listing as list_files answers it.
func entries(list []client.DirEntry) Entries {
	out := Entries{Entries: make([]Entry, 0, len(list))}
	for _, e := range list {
		out.Entries = append(out.Entries, Entry{Name: e.Name, Path: e.Path, IsDir: e.IsDir, IsSymlink: e.IsSymlink, Size: e.Size})
	}
	return out
}
