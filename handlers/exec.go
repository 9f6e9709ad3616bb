package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// execRequest is the body of POST /v1/vms/{vm}/exec.
type execRequest struct {
	Command        string            `json:"command" validate:"required_without=Argv,excluded_with=Argv,max=131072"`
	Argv           []string          `json:"argv" validate:"required_without=Command,omitempty,min=1,max=4096,dive,max=131072"`
	Cwd            string            `json:"cwd" validate:"omitempty,startswith=/,max=4096"`
	Env            map[string]string `json:"env" validate:"omitempty,max=256,dive,keys,min=1,max=256,endkeys,max=65536"`
	Stdin          *string           `json:"stdin"`
	StdinEncoding  string            `json:"stdinEncoding" validate:"omitempty,oneof=utf8 base64"`
	TimeoutMs      int64             `json:"timeoutMs" validate:"gte=0,lte=86400000"`
	MaxOutputBytes int               `json:"maxOutputBytes" validate:"gte=0,lte=67108864"`
}

// execResultJSON is the answer of a buffered exec.
type execResultJSON struct {
	ExitCode   int    `json:"exitCode"`
	Signal     string `json:"signal,omitempty"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Encoding   string `json:"encoding"` // "utf8" or "base64", for both streams
	Truncated  bool   `json:"truncated"`
	DurationMs int64  `json:"durationMs"`
}

// outputJSON is the data of stdout/stderr SSE events.
type outputJSON struct {
	Seq      uint64 `json:"seq"`
	Stream   string `json:"stream"`
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
	TS       string `json:"ts"`
}

func encodeBytes(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), "utf8"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func wantsEventStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (req *execRequest) toService() (vms.ExecRequest, error) {
	out := vms.ExecRequest{Command: req.Command, Argv: req.Argv, Cwd: req.Cwd, Env: req.Env,
		Timeout: time.Duration(req.TimeoutMs) * time.Millisecond, MaxOutputBytes: req.MaxOutputBytes}
	if req.Stdin != nil {
		out.Stdin = []byte(*req.Stdin)
		if req.StdinEncoding == "base64" {
			b, err := base64.StdEncoding.DecodeString(*req.Stdin)
			if err != nil {
				return out, gateway.Errorf(gateway.CodeInvalidArgument, "stdin is not valid base64").WithDetail("field", "stdin")
			}
			out.Stdin = b
		}
	}
	if strings.TrimSpace(req.Command) == "" && len(req.Argv) == 0 {
		return out, gateway.Errorf(gateway.CodeInvalidArgument, "command or argv is required").WithDetail("field", "command")
	}
	if len(req.Argv) > 0 && req.Argv[0] == "" {
		return out, gateway.Errorf(gateway.CodeInvalidArgument, "argv[0] must name a program").WithDetail("field", "argv")
	}
	return out, nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req execRequest
	if err := decodeJSONBytes(body, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	sreq, err := req.toService()
	if err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	vmID := pathParam(r, "vm")
	if wantsEventStream(r) {
		if r.Header.Get("Idempotency-Key") != "" {
			writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Idempotency-Key is not supported on a streamed exec; use the buffered form or a process").WithDetail("field", "Idempotency-Key"))
			return
		}
		// Refuse an unusable VM with a status, before the stream starts.
		if err := s.vms.Usable(r.Context(), p.tenant.ID, vmID); err != nil {
			writeError(w, r, err)
			return
		}
		s.execStream(w, r, p.tenant, vmID, sreq)
		return
	}
	s.idempotent(w, r, body, func(ctx context.Context) (int, any, error) {
		start := time.Now()
		res, err := s.vms.Exec(ctx, p.tenant, vmID, sreq, nil)
		s.metrics.execDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			return 0, nil, err
		}
		out := execResultJSON{ExitCode: res.ExitCode, Signal: res.Signal, Encoding: "utf8",
			Truncated: res.StdoutTruncated || res.StderrTruncated, DurationMs: res.Duration.Milliseconds()}
		var e1, e2 string
		out.Stdout, e1 = encodeBytes(res.Stdout)
		out.Stderr, e2 = encodeBytes(res.Stderr)
		if e1 == "base64" || e2 == "base64" {
			out.Stdout = base64.StdEncoding.EncodeToString(res.Stdout)
			out.Stderr = base64.StdEncoding.EncodeToString(res.Stderr)
			out.Encoding = "base64"
		}
		return http.StatusOK, out, nil
	})
}

// execStream runs an exec whose output is streamed as SSE stdout/stderr
// events and ends with an exit (or error) event.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, tenant gateway.Tenant, vmID string, req vms.ExecRequest) {
	// The output goes through a bounded log so that the event lane of the
	// sidecar never waits for this client.
	log := vms.NewLog[vms.Chunk](4 << 20)
	s.sse.serve(w, r, 0, func(ctx context.Context, emit func(sseEvent) error) error {
		done := make(chan struct{})
		var res *vms.ExecResult
		var execErr error
		go func() {
			defer close(done)
			start := time.Now()
			res, execErr = s.vms.Exec(ctx, tenant, vmID, req, func(c vms.Chunk) { log.Append(0, len(c.Data), c) })
			s.metrics.execDuration.Observe(time.Since(start).Seconds())
			log.Close(nil)
		}()
		err := followLog(ctx, log, 0, emit, outputEvent, func(last uint64, _ error) []sseEvent {
			<-done
			return []sseEvent{exitEvent(last, res, execErr)}
		})
		<-done
		return err
	})
}

func outputEvent(e vms.Entry[vms.Chunk]) sseEvent {
	data, enc := encodeBytes(e.V.Data)
	b, _ := json.Marshal(outputJSON{Seq: e.Seq, Stream: e.V.Stream, Data: data, Encoding: enc, TS: rfc3339(e.V.Time)})
	return sseEvent{ID: strconv.FormatUint(e.Seq, 10), Event: e.V.Stream, Data: b}
}

func exitEvent(last uint64, res *vms.ExecResult, err error) sseEvent {
	if err != nil {
		return endEvent(last, err)
	}
	var sig any
	if res.Signal != "" {
		sig = res.Signal
	}
	b, _ := json.Marshal(map[string]any{"exitCode": res.ExitCode, "signal": sig,
		"truncated": res.StdoutTruncated || res.StderrTruncated, "durationMs": res.Duration.Milliseconds()})
	return sseEvent{ID: strconv.FormatUint(last, 10), Event: "exit", Data: b}
}

// readBody reads a JSON body whole (it is bounded), so that it can be both
// decoded and hashed for idempotency.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, jsonError(err, limit)
	}
	return b, nil
}

func decodeJSONBytes(b []byte, limit int64, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if dec.More() {
		return gateway.Errorf(gateway.CodeInvalidArgument, "the body must hold a single JSON object")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		return gateway.Errorf(gateway.CodeInvalidArgument, "the body must hold a single JSON object")
	}
	return validateStruct(v)
}

// idempotencyTTL is how long an Idempotency-Key's outcome is kept.
const idempotencyTTL = 24 * time.Hour

// idempotent runs op once per Idempotency-Key: a retry within the TTL gets
// the first outcome (status and body) without running op again. Without the
// header op simply runs.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, body []byte, op func(ctx context.Context) (int, any, error)) {
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		status, v, err := op(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, status, v)
		return
	}
	if len(key) > 255 {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Idempotency-Key is longer than 255 characters").WithDetail("field", "Idempotency-Key"))
		return
	}
	p := principalFrom(r.Context())
	sum := sha256.Sum256(append([]byte(r.Method+" "+r.URL.Path+"\n"), body...))
	hash := hex.EncodeToString(sum[:])
	rec, fresh, err := s.store.BeginIdempotent(r.Context(), p.tenant.ID, key, hash, idempotencyTTL)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if !fresh {
		w.Header().Set("Idempotent-Replayed", "true")
		ct := "application/json"
		if rec.Status >= 400 {
			ct = "application/problem+json"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(rec.Status)
		_, _ = w.Write(rec.Body)
		return
	}
	// The operation runs to its end and its outcome is recorded even if the
	// client goes away meanwhile: the retry it will make must get that
	// outcome, not run the command a second time.
	ctx := context.WithoutCancel(r.Context())
	status, v, opErr := op(ctx)
	if opErr != nil {
		switch gateway.ErrorCode(opErr) {
		case gateway.CodeInvalidArgument, gateway.CodeNotFound, gateway.CodeConflict, gateway.CodeResourceExhausted:
			// Refused before anything ran: the client may retry with the
			// same key once it fixed the cause.
			_ = s.store.AbandonIdempotent(ctx, p.tenant.ID, key)
			writeError(w, r, opErr)
			return
		}
		rw := &recordWriter{header: http.Header{}}
		writeError(rw, r, opErr)
		_ = s.store.CompleteIdempotent(ctx, p.tenant.ID, key, rw.status, rw.buf.Bytes())
		writeError(w, r, opErr)
		return
	}
	b, _ := json.Marshal(v)
	b = append(b, '\n')
	if err := s.store.CompleteIdempotent(ctx, p.tenant.ID, key, status, b); err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// recordWriter captures a response to store it.
type recordWriter struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (rw *recordWriter) Header() http.Header         { return rw.header }
func (rw *recordWriter) Write(b []byte) (int, error) { return rw.buf.Write(b) }
func (rw *recordWriter) WriteHeader(status int)      { rw.status = status }
