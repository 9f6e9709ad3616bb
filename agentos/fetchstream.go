package agentos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// Stream operations of VmFetchRequest, as the 0.2.21 sidecar names them:
// "start" sends the request and answers with the response head and a
// stream id, "read" answers with the next chunk of the body (waiting for
// one) and whether it was the last, "cancel" drops the stream.
const (
	fetchStreamStart  = "start"
	fetchStreamRead   = "read"
	fetchStreamCancel = "cancel"
)

// FetchChunkSize bounds one read of a streamed response body: a frame stays
// far below the engine's 16 MiB limit while a large body takes few calls.
const FetchChunkSize = 256 << 10

// fetchCancelTimeout bounds the cancel sent when a stream is closed early:
// it is sent after the caller is gone, so it cannot use the caller's
// context.
const fetchCancelTimeout = 5 * time.Second

// wire is the VmFetchRequest of r. Headers with several values are joined
// with ", " (the sidecar takes one value a name), cookies with "; ".
func (r FetchRequest) wire() (protocol.VMFetchRequest, error) {
	if r.Port == 0 {
		return protocol.VMFetchRequest{}, fmt.Errorf("%w: port is required", ErrInvalidArgument)
	}
	if r.Method == "" {
		r.Method = http.MethodGet
	}
	if r.Path == "" {
		r.Path = "/"
	}
	headers := make(map[string]string, len(r.Header))
	for k, v := range r.Header {
		if len(v) == 0 {
			continue
		}
		sep := ", "
		if http.CanonicalHeaderKey(k) == "Cookie" {
			sep = "; "
		}
		headers[k] = strings.Join(v, sep)
	}
	hj, err := json.Marshal(headers)
	if err != nil {
		return protocol.VMFetchRequest{}, err
	}
	req := protocol.VMFetchRequest{Port: r.Port, Method: r.Method, Path: r.Path, HeadersJSON: string(hj)}
	if r.Body != nil {
		content, enc := encodeContent(r.Body)
		if enc != nil {
			req.BodyBase64 = &content
		} else {
			req.Body = &content
		}
	}
	return req, nil
}

// wireHeader is the header of a response as the sidecar lists it.
func wireHeader(kvs [][2]string) http.Header {
	h := make(http.Header, len(kvs))
	for _, kv := range kvs {
		h.Add(kv[0], kv[1])
	}
	return h
}

// FetchStream is a response of a server inside the VM whose body is read as
// it arrives, for large bodies and event streams. It is an io.ReadCloser;
// Close it to release the sidecar's stream.
type FetchStream struct {
	Status     int
	StatusText string
	Header     http.Header

	vm  *VM
	ctx context.Context
	id  string
	// req carries the port and path the sidecar's stream calls repeat.
	req protocol.VMFetchRequest

	mu      sync.Mutex
	pending []byte
	done    bool
	err     error
	closed  bool
}

type fetchStartJSON struct {
	StreamID   string      `json:"streamId"`
	Status     int         `json:"status"`
	StatusText string      `json:"statusText"`
	Headers    [][2]string `json:"headers"`
}

type fetchReadJSON struct {
	Body string `json:"body"`
	Done bool   `json:"done"`
}

// FetchStream sends an HTTP request to a listener inside the VM and returns
// once the response head arrived. The body's reads use ctx, so the stream
// lives no longer than it.
func (vm *VM) FetchStream(ctx context.Context, r FetchRequest) (*FetchStream, error) {
	req, err := r.wire()
	if err != nil {
		return nil, err
	}
	op := fetchStreamStart
	req.StreamOperation = &op
	resp, err := vm.call(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("agentos: fetch :%d%s: %w", r.Port, req.Path, err)
	}
	f, ok := resp.(protocol.VMFetchResponse)
	if !ok {
		return nil, unexpected("VmFetchRequest", resp)
	}
	var head fetchStartJSON
	if err := json.Unmarshal([]byte(f.ResponseJSON), &head); err != nil {
		return nil, fmt.Errorf("%w: fetch stream head: %v", ErrProtocol, err)
	}
	if head.StreamID == "" {
		return nil, fmt.Errorf("%w: fetch stream head without a stream id", ErrProtocol)
	}
	// The body went with start; the stream calls need only the target.
	target := protocol.VMFetchRequest{Port: req.Port, Method: req.Method, Path: req.Path, HeadersJSON: "{}", StreamID: &head.StreamID}
	return &FetchStream{
		Status: head.Status, StatusText: head.StatusText, Header: wireHeader(head.Headers),
		vm: vm, ctx: ctx, id: head.StreamID, req: target,
	}, nil
}

// Read reads the next bytes of the body, waiting for the guest to send
// some; it returns io.EOF after the last.
func (s *FetchStream) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.pending) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.done {
			return 0, io.EOF
		}
		if s.closed {
			return 0, fmt.Errorf("%w: read of a closed fetch stream", ErrClosed)
		}
		s.pending, s.done, s.err = s.next(min(max(len(p), 1), FetchChunkSize))
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// next reads one chunk of at most limit bytes.
func (s *FetchStream) next(limit int) ([]byte, bool, error) {
	req := s.req
	op := fetchStreamRead
	req.StreamOperation = &op
	mb := uint32(limit)
	req.MaxBytes = &mb
	resp, err := s.vm.call(s.ctx, req)
	if err != nil {
		return nil, false, fmt.Errorf("agentos: fetch stream %s: %w", s.id, err)
	}
	f, ok := resp.(protocol.VMFetchResponse)
	if !ok {
		return nil, false, unexpected("VmFetchRequest", resp)
	}
	var rd fetchReadJSON
	if err := json.Unmarshal([]byte(f.ResponseJSON), &rd); err != nil {
		return nil, false, fmt.Errorf("%w: fetch stream chunk: %v", ErrProtocol, err)
	}
	chunk, err := base64.StdEncoding.DecodeString(rd.Body)
	if err != nil {
		return nil, false, fmt.Errorf("%w: fetch stream chunk: %v", ErrProtocol, err)
	}
	return chunk, rd.Done, nil
}

// Close releases the stream; a body not read to its end is cancelled in the
// sidecar, so the guest's server sees the connection end.
func (s *FetchStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.done {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), fetchCancelTimeout)
	defer cancel()
	req := s.req
	op := fetchStreamCancel
	req.StreamOperation = &op
	_, err := s.vm.call(ctx, req)
	if err != nil && !errors.Is(err, ErrVMDisposed) && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("agentos: cancel fetch stream %s: %w", s.id, err)
	}
	return nil
}
