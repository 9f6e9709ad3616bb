package agentos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// FetchRequest is an HTTP request to a server listening inside the VM.
type FetchRequest struct {
	Port    uint16
	Method  string
	Path    string
	Header  http.Header
	Body    []byte
	MaxBody uint32 // 0: the sidecar's default
}

// FetchResponse is the answer of a server inside the VM.
type FetchResponse struct {
	Status     int
	StatusText string
	Header     http.Header
	Body       []byte
}

// fetchJSON is the sidecar's description of a response.
type fetchJSON struct {
	Status       int         `json:"status"`
	StatusText   string      `json:"statusText"`
	Headers      [][2]string `json:"headers"`
	Body         string      `json:"body"`
	BodyEncoding string      `json:"bodyEncoding"`
}

// Fetch sends an HTTP request to a listener inside the VM and buffers the
// whole answer; FetchStream streams it.
func (vm *VM) Fetch(ctx context.Context, r FetchRequest) (*FetchResponse, error) {
	req, err := r.wire()
	if err != nil {
		return nil, err
	}
	if r.MaxBody > 0 {
		req.MaxBytes = &r.MaxBody
	}
	resp, err := vm.call(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("agentos: fetch :%d%s: %w", r.Port, r.Path, err)
	}
	f, ok := resp.(protocol.VMFetchResponse)
	if !ok {
		return nil, unexpected("VmFetchRequest", resp)
	}
	var fj fetchJSON
	if err := json.Unmarshal([]byte(f.ResponseJSON), &fj); err != nil {
		return nil, fmt.Errorf("%w: fetch response: %v", ErrProtocol, err)
	}
	out := &FetchResponse{Status: fj.Status, StatusText: fj.StatusText, Header: wireHeader(fj.Headers), Body: []byte(fj.Body)}
	if fj.BodyEncoding == "base64" {
		if out.Body, err = base64.StdEncoding.DecodeString(fj.Body); err != nil {
			return nil, fmt.Errorf("%w: fetch body: %v", ErrProtocol, err)
		}
	}
	return out, nil
}
