package handlers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/idempotency"
	"github.com/agentos-gateway/agentos-gateway/sse"
	"github.com/agentos-gateway/agentos-gateway/streamlog"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// encodeBytes returns output as JSON text: as is when it is text, base64
// when it is not valid UTF-8 or is binary (see isBinary).
func encodeBytes(b []byte) (string, string) {
	if utf8.Valid(b) && !isBinary(b) {
		return string(b), "utf8"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// isBinary reports whether b is better sent as base64: it holds a NUL byte,
// more than one control byte (other than tab, newline, carriage return and
// escape) in ten, or would more than double in size as a JSON string.
// Control bytes and <, >, & take six bytes each there (\u0000), so such
// output sent as text would make the answer several times the output;
// base64 is 4/3. Escape is left out of the count because terminal output is
// full of escape sequences and is text all the same; the size bound still
// applies to it.
func isBinary(b []byte) bool {
	control, escaped := 0, 0
	for _, c := range b {
		switch {
		case c == 0:
			return true
		case c == '\t', c == '\n', c == '\r', c == '"', c == '\\':
			escaped += 2
		case c == 0x1b:
			escaped += 6
		case c < 0x20:
			control++
			escaped += 6
		case c == 0x7f:
			control++
			escaped++
		case c == '<', c == '>', c == '&':
			escaped += 6
		default:
			escaped++
		}
	}
	return control*10 > len(b) || escaped > 2*len(b)
}

func wantsEventStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// resolveInvocation checks the combination of command, args and argv and
// returns the command line or the argv to run (exactly one of them is set).
// An empty args list still means "no shell": `{"command":"ls","args":[]}`
// runs ls.
func resolveInvocation(c api.Invocation) (string, []string, error) {
	switch {
	case c.Argv != nil && (c.Command != "" || c.Args != nil):
		return "", nil, gateway.Errorf(gateway.CodeInvalidArgument,
			"argv cannot be combined with command or args: send argv alone, command alone (a command line), or command with args").WithDetail("field", "argv")
	case c.Argv != nil:
		if len(c.Argv) == 0 || c.Argv[0] == "" {
			return "", nil, gateway.Errorf(gateway.CodeInvalidArgument, "argv[0] must name a program").WithDetail("field", "argv")
		}
		return "", c.Argv, nil
	case c.Args != nil && c.Command == "":
		return "", nil, gateway.Errorf(gateway.CodeInvalidArgument, "args needs command: the program the arguments are given to").WithDetail("field", "args")
	case c.Args != nil:
		return "", append([]string{c.Command}, c.Args...), nil
	case strings.TrimSpace(c.Command) == "":
		return "", nil, gateway.Errorf(gateway.CodeInvalidArgument, "command or argv is required").WithDetail("field", "command")
	}
	return c.Command, nil, nil
}

// execService is the service's request for an exec body.
func execService(req *api.ExecRequest) (vms.ExecRequest, error) {
	command, argv, err := resolveInvocation(req.Invocation)
	if err != nil {
		return vms.ExecRequest{}, err
	}
	out := vms.ExecRequest{Command: command, Argv: argv, Cwd: req.Cwd, Env: req.Env,
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
	return out, nil
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, s.cfg.MaxBodyBytes)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var req api.ExecRequest
	if err := decodeJSONBytes(body, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	sreq, err := execService(&req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	vmID := pathParam(r, "vm")
	if wantsEventStream(r) {
		// The deadline, the VM and the cwd are checked before the stream
		// starts, so that a refusal is a status.
		prep, err := s.vms.PrepareExec(r.Context(), p.tenant, vmID, sreq)
		if err != nil {
			writeError(w, r, err)
			return
		}
		s.execStreamIdempotent(w, r, body, p.tenant, prep)
		return
	}
	told := func(key string, v any, err error) []gateway.Event {
		return []gateway.Event{execDoneEvent(p.tenant.ID, vmID, key, v, err)}
	}
	if preferAsync(r) {
		s.execAsync(w, r, body, p.tenant, vmID, sreq, told)
		return
	}
	s.idempotentTold(w, r, body, http.StatusOK, func(ctx context.Context) (any, error) {
		start := time.Now()
		res, err := s.vms.Exec(ctx, p.tenant, vmID, sreq, nil)
		s.metrics.execDuration.Observe(time.Since(start).Seconds())
		if err != nil {
			return nil, withPartialOutput(err, res)
		}
		return execResultBody(res), nil
	}, told)
}

// maxEventOutput bounds the output an exec.done event carries: past it,
// the event says so and the result is read from GET .../exec/{key}.
const maxEventOutput = 64 << 10

// execDoneEvent is the exec.done event of an exec with an idempotency key:
// the result v or the problem err, as a retry would replay them.
func execDoneEvent(tenantID, vmID, key string, v any, err error) gateway.Event {
	data := gateway.ExecDoneData{VMID: vmID, IdempotencyKey: key}
	if err != nil {
		data.Error = &gateway.EventProblem{Code: gateway.ErrorCode(err), Detail: gateway.ErrorMessage(err)}
	} else if res, ok := v.(api.ExecResult); ok {
		data.ExitCode, data.Signal = &res.ExitCode, res.Signal
		if b, merr := json.Marshal(res); merr == nil && len(b) <= maxEventOutput {
			data.Result = b
		} else {
			data.OutputOmitted = true
		}
	}
	return gateway.NewEvent(gateway.EventExecDone, tenantID, vmID, time.Now(), data)
}

// execAsync answers an exec with Prefer: respond-async at once, 202, and
// runs it in the background under its Idempotency-Key: the outcome is
// recorded for GET .../exec/{key} and the idempotent replay, with its
// exec.done event. A refusal before anything runs is still a status.
func (s *Server) execAsync(w http.ResponseWriter, r *http.Request, body []byte, tenant gateway.Tenant, vmID string, sreq vms.ExecRequest,
	told func(key string, v any, err error) []gateway.Event) {
	if r.Header.Get(idempotencyHeader) == "" {
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "Prefer: respond-async needs an Idempotency-Key: it names the exec whose outcome comes later").WithDetail("field", idempotencyHeader))
		return
	}
	claim, outcome, ok := s.claimIdempotencyKey(w, r, body, tenant)
	switch {
	case !ok:
		return
	case outcome != nil:
		s.replayOutcome(w, r, http.StatusOK, outcome)
		return
	}
	prep, err := s.vms.PrepareExec(r.Context(), tenant, vmID, sreq)
	if err != nil {
		_ = s.recordOutcome(r, claim, nil, err)
		writeError(w, r, err)
		return
	}
	// The background run outlives the request: it keeps what it needs of
	// it, not the request itself.
	rec := r.WithContext(context.WithoutCancel(r.Context()))
	started := prep.Background(func(res *vms.ExecResult, err error) {
		var v any
		if err == nil {
			v = execResultBody(res)
		}
		err = withPartialOutput(err, res)
		if rerr := s.recordOutcome(rec, claim, v, err, told(claim.Key(), v, err)...); rerr != nil {
			s.log.Error().Err(rerr).Str("vm", vmID).Str("key", claim.Key()).Msg("record an async exec's outcome")
		}
	})
	if !started {
		err := gateway.Errorf(gateway.CodeUnavailable, "the gateway is shutting down")
		_ = s.recordOutcome(r, claim, nil, err)
		writeError(w, r, err)
		return
	}
	loc := "/v1/vms/" + vmID + "/exec/" + url.PathEscape(claim.Key())
	w.Header().Set("Location", loc)
	w.Header().Set("Preference-Applied", "respond-async")
	writeJSON(w, http.StatusAccepted, api.ExecAccepted{IdempotencyKey: claim.Key(), Status: "running", Location: loc})
}

// execOutcome answers GET /v1/vms/{vm}/exec/{key}: the recorded outcome of
// the exec made with that Idempotency-Key (its result, 200, or its
// problem), or 202 while it runs.
func (s *Server) execOutcome(w http.ResponseWriter, r *http.Request) {
	vmID, key := pathParam(r, "vm"), pathParam(r, "key")
	if _, err := s.vms.Get(r.Context(), principalFrom(r.Context()).tenant.ID, vmID); err != nil {
		writeError(w, r, err)
		return
	}
	outcome, err := s.keeper.Lookup(r.Context(), principalFrom(r.Context()).tenant.ID, key, "POST /v1/vms/"+vmID+"/exec")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if outcome == nil {
		loc := "/v1/vms/" + vmID + "/exec/" + url.PathEscape(key)
		writeJSON(w, http.StatusAccepted, api.ExecAccepted{IdempotencyKey: key, Status: "running", Location: loc})
		return
	}
	s.replayOutcome(w, r, http.StatusOK, outcome)
}

// withPartialOutput adds to an exec's deadline_exceeded the output the
// command had produced before it was killed (res), encoded as a result's:
// details.stdout, stderr, encoding, truncated, durationMs and partial.
func withPartialOutput(err error, res *vms.ExecResult) error {
	var ge *gateway.Error
	if res == nil || !errors.As(err, &ge) || ge.Code != gateway.CodeDeadlineExceeded {
		return err
	}
	body := execResultBody(res)
	out := *ge
	out.Details = maps.Clone(ge.Details)
	out.Message += "; details.stdout and details.stderr hold the output it had produced (partial)"
	return out.WithDetail("partial", true).WithDetail("stdout", body.Stdout).WithDetail("stderr", body.Stderr).
		WithDetail("encoding", body.Encoding).WithDetail("truncated", body.Truncated).WithDetail("durationMs", body.DurationMs)
}

// execResultBody is the JSON answer of a finished exec.
func execResultBody(res *vms.ExecResult) api.ExecResult {
	out := api.ExecResult{ExitCode: res.ExitCode, Signal: res.Signal, Encoding: "utf8",
		Truncated: res.StdoutTruncated || res.StderrTruncated, DurationMs: res.Duration.Milliseconds()}
	var e1, e2 string
	out.Stdout, e1 = encodeBytes(res.Stdout)
	out.Stderr, e2 = encodeBytes(res.Stderr)
	if e1 == "base64" || e2 == "base64" {
		out.Stdout = base64.StdEncoding.EncodeToString(res.Stdout)
		out.Stderr = base64.StdEncoding.EncodeToString(res.Stderr)
		out.Encoding = "base64"
	}
	return out
}

// execStreamIdempotent is the streamed exec with an optional
// Idempotency-Key: the first request streams and records its result (the
// same record a buffered exec makes); a retry gets that result replayed as
// stdout, stderr and exit events, and the command never runs twice.
func (s *Server) execStreamIdempotent(w http.ResponseWriter, r *http.Request, body []byte, tenant gateway.Tenant, prep *vms.PreparedExec) {
	claim, outcome, ok := s.claimIdempotencyKey(w, r, body, tenant)
	switch {
	case !ok:
		prep.Release()
		return
	case outcome != nil:
		prep.Release()
		s.replayExecStream(w, r, outcome)
		return
	case claim == nil:
		s.execStream(w, r, prep, nil)
		return
	}
	s.execStream(w, r, prep, func(res *vms.ExecResult, err error) {
		var v any
		if err == nil {
			v = execResultBody(res)
		}
		s.recordOutcome(r, claim, v, err, execDoneEvent(tenant.ID, pathParam(r, "vm"), claim.Key(), v, err))
	})
}

// replayExecStream answers a recorded exec outcome as a stream: a recorded
// problem as itself, a result as its events.
func (s *Server) replayExecStream(w http.ResponseWriter, r *http.Request, outcome *idempotency.Outcome) {
	w.Header().Set("Idempotent-Replayed", "true")
	var res api.ExecResult
	if err := outcome.Err(); err != nil {
		writeError(w, r, err)
		return
	}
	if err := outcome.Decode(&res); err != nil {
		writeError(w, r, err)
		return
	}
	decode := func(s string) []byte {
		if res.Encoding == "base64" {
			b, _ := base64.StdEncoding.DecodeString(s)
			return b
		}
		return []byte(s)
	}
	now := time.Now()
	s.sse.Serve(w, r, 0, func(ctx context.Context, emit func(sse.Event) error) error {
		var seq uint64
		for _, c := range []vms.Chunk{{Stream: "stdout", Data: decode(res.Stdout), Time: now}, {Stream: "stderr", Data: decode(res.Stderr), Time: now}} {
			if len(c.Data) == 0 {
				continue
			}
			seq++
			if err := emit(outputEvent(streamlog.Entry[vms.Chunk]{Seq: seq, Size: len(c.Data), V: c})); err != nil {
				return err
			}
		}
		b, _ := json.Marshal(api.ExecExitEvent{ExitCode: res.ExitCode, Signal: signalOrNull(res.Signal), Truncated: res.Truncated, DurationMs: res.DurationMs})
		return emit(sse.Event{ID: strconv.FormatUint(seq+1, 10), Event: "exit", Data: b})
	})
}

// execStream runs an exec whose output is streamed as SSE stdout/stderr
// events and ends with an exit (or error) event.
//
// With record set, the command runs to its end even when the client goes away,
// and record receives its outcome.
func (s *Server) execStream(w http.ResponseWriter, r *http.Request, prep *vms.PreparedExec, record func(*vms.ExecResult, error)) {
	// The VM is let go even if the stream never starts.
	defer prep.Release()
	// The output goes through a bounded log so that the event lane of the
	// sidecar never waits for this client.
	log := streamlog.New[vms.Chunk](4 << 20)
	s.sse.Serve(w, r, 0, func(ctx context.Context, emit func(sse.Event) error) error {
		done := make(chan struct{})
		var res *vms.ExecResult
		var execErr error
		execCtx := ctx
		if record != nil {
			execCtx = context.WithoutCancel(ctx)
		}
		go func() {
			defer close(done)
			start := time.Now()
			res, execErr = prep.Run(execCtx, func(c vms.Chunk) { log.Append(0, len(c.Data), c) })
			s.metrics.execDuration.Observe(time.Since(start).Seconds())
			if record != nil {
				record(res, execErr)
			}
			log.Close(nil)
		}()
		err := sse.FollowLog(ctx, log, 0, emit, outputEvent, func(last uint64, _ error) []sse.Event {
			<-done
			return []sse.Event{exitEvent(last, res, execErr)}
		})
		<-done
		return err
	})
}

func outputEvent(e streamlog.Entry[vms.Chunk]) sse.Event {
	data, enc := encodeBytes(e.V.Data)
	b, _ := json.Marshal(api.OutputEvent{Seq: e.Seq, Stream: e.V.Stream, Data: data, Encoding: enc, TS: e.V.Time.UTC()})
	return sse.Event{ID: strconv.FormatUint(e.Seq, 10), Event: e.V.Stream, Data: b}
}

// exitEventID is the id of an exit event: its own, after the last output's
// (last), so that a client that resumes after it is told that nothing is
// left (processOutput answers 204).
func exitEventID(last uint64) string { return strconv.FormatUint(last+1, 10) }

func exitEvent(last uint64, res *vms.ExecResult, err error) sse.Event {
	if err != nil {
		return sse.EndEvent(last, err)
	}
	b, _ := json.Marshal(api.ExecExitEvent{ExitCode: res.ExitCode, Signal: signalOrNull(res.Signal),
		Truncated: res.StdoutTruncated || res.StderrTruncated, DurationMs: res.Duration.Milliseconds()})
	return sse.Event{ID: exitEventID(last), Event: "exit", Data: b}
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
