package agentos

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// JSON-RPC error codes used in answers to ACP host requests.
const (
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcInternalError  = -32603
)

type rpcRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// errInvalidParams marks a handler failure caused by the request's params.
type errInvalidParams struct{ msg string }

func (e errInvalidParams) Error() string { return e.msg }

// serveACPHostRequest answers the client side of ACP for an agent running in
// vm: filesystem reads and writes and terminals, on the VM itself (SPEC §7.8).
func serveACPHostRequest(ctx context.Context, vm *VM, request string) string {
	var req rpcRequest
	if err := json.Unmarshal([]byte(request), &req); err != nil {
		return marshalRPC(rpcResponse{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcError{Code: -32700, Message: "parse error: " + err.Error()}})
	}
	if req.ID == nil {
		req.ID = json.RawMessage("null")
	}
	resp := rpcResponse{JSONRPC: "2.0", ID: req.ID}
	var result any
	var err error
	if vm == nil {
		err = errors.New("no vm for this request")
	} else {
		result, err = vm.handleHostMethod(ctx, req.Method, req.Params)
	}
	switch {
	case err == nil:
		if result == nil {
			resp.Result = json.RawMessage("null")
		} else {
			resp.Result = result
		}
	case errors.Is(err, errMethodNotFound):
		resp.Error = &rpcError{Code: rpcMethodNotFound, Message: "Method not found: " + req.Method}
	case errors.As(err, new(errInvalidParams)):
		resp.Error = &rpcError{Code: rpcInvalidParams, Message: err.Error()}
	default:
		resp.Error = &rpcError{Code: rpcInternalError, Message: err.Error()}
	}
	return marshalRPC(resp)
}

var errMethodNotFound = errors.New("method not found")

func marshalRPC(r rpcResponse) string {
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(rpcResponse{JSONRPC: "2.0", ID: r.ID, Error: &rpcError{Code: rpcInternalError, Message: err.Error()}})
	}
	return string(b)
}

func decodeParams(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return errInvalidParams{msg: "invalid params: " + err.Error()}
	}
	return nil
}

func (vm *VM) handleHostMethod(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case "fs/read_text_file", "fs/read":
		var p struct {
			Path     string `json:"path"`
			Line     *int   `json:"line"`
			Limit    *int   `json:"limit"`
			Encoding string `json:"encoding"`
		}
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		data, err := vm.ReadFile(ctx, p.Path)
		if err != nil {
			return nil, err
		}
		if p.Encoding == "base64" {
			return map[string]string{"content": base64.StdEncoding.EncodeToString(data)}, nil
		}
		return map[string]string{"content": sliceLines(string(data), p.Line, p.Limit)}, nil
	case "fs/write_text_file", "fs/write":
		var p struct {
			Path     string `json:"path"`
			Content  string `json:"content"`
			Encoding string `json:"encoding"`
		}
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		data := []byte(p.Content)
		if p.Encoding == "base64" {
			var err error
			if data, err = base64.StdEncoding.DecodeString(p.Content); err != nil {
				return nil, errInvalidParams{msg: "content is not base64"}
			}
		}
		return nil, vm.WriteFile(ctx, p.Path, data)
	case "fs/read_dir", "fs/readDir":
		var p struct {
			Path string `json:"path"`
		}
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		entries, err := vm.ReadDir(ctx, p.Path)
		if err != nil {
			return nil, err
		}
		type entry struct {
			Name string `json:"name"`
			Path string `json:"path"`
			Type string `json:"type"`
		}
		out := make([]entry, len(entries))
		for i, e := range entries {
			t := "file"
			switch {
			case e.IsDir:
				t = "directory"
			case e.IsSymlink:
				t = "symlink"
			}
			out[i] = entry{Name: e.Name, Path: e.Path, Type: t}
		}
		return map[string]any{"entries": out}, nil
	}
	if strings.HasPrefix(method, "terminal/") {
		return vm.terminals.handle(ctx, strings.TrimPrefix(method, "terminal/"), params)
	}
	return nil, errMethodNotFound
}

// sliceLines returns limit lines starting at the 1-based line.
func sliceLines(s string, line, limit *int) string {
	if line == nil && limit == nil {
		return s
	}
	lines := strings.SplitAfter(s, "\n")
	start := 0
	if line != nil && *line > 1 {
		start = min(*line-1, len(lines))
	}
	end := len(lines)
	if limit != nil && *limit >= 0 {
		end = min(start+*limit, len(lines))
	}
	return strings.Join(lines[start:end], "")
}

// terminalTable implements ACP terminal/* for one VM.
type terminalTable struct {
	vm   *VM
	mu   sync.Mutex
	next int
	byID map[string]*terminal
}

type terminal struct {
	proc      *Process
	mu        sync.Mutex
	out       []byte
	limit     int
	truncated bool
}

func (t *terminal) add(o Output) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.out = append(t.out, o.Data...)
	if len(t.out) > t.limit {
		// Keep the end: ACP truncates from the beginning.
		t.out = append([]byte(nil), t.out[len(t.out)-t.limit:]...)
		t.truncated = true
	}
}

func (tt *terminalTable) get(params json.RawMessage) (*terminal, string, error) {
	var p struct {
		TerminalID string `json:"terminalId"`
	}
	if err := decodeParams(params, &p); err != nil {
		return nil, "", err
	}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	t, ok := tt.byID[p.TerminalID]
	if !ok {
		return nil, "", errInvalidParams{msg: "unknown terminal " + strconv.Quote(p.TerminalID)}
	}
	return t, p.TerminalID, nil
}

func exitStatusJSON(st gateway.ExitStatus) map[string]any {
	m := map[string]any{"exitCode": st.ExitCode, "signal": nil}
	if st.Signal != "" {
		m["signal"] = st.Signal
	}
	return m
}

func (tt *terminalTable) handle(ctx context.Context, op string, params json.RawMessage) (any, error) {
	switch op {
	case "create":
		var p struct {
			Command         string          `json:"command"`
			Args            []string        `json:"args"`
			Env             json.RawMessage `json:"env"`
			Cwd             string          `json:"cwd"`
			OutputByteLimit *int            `json:"outputByteLimit"`
		}
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		if p.Command == "" {
			return nil, errInvalidParams{msg: "command is required"}
		}
		env, err := parseTerminalEnv(p.Env)
		if err != nil {
			return nil, err
		}
		limit := 1 << 20
		if p.OutputByteLimit != nil && *p.OutputByteLimit > 0 {
			limit = *p.OutputByteLimit
		}
		t := &terminal{limit: limit}
		argv := append([]string{p.Command}, p.Args...)
		proc, err := tt.vm.Spawn(ctx, argv, SpawnOptions{Cwd: p.Cwd, Env: env, CloseStdin: true, OnOutput: t.add})
		if err != nil {
			return nil, err
		}
		t.proc = proc
		tt.mu.Lock()
		if tt.byID == nil {
			tt.byID = map[string]*terminal{}
		}
		tt.next++
		id := "acp-terminal-" + strconv.Itoa(tt.next)
		tt.byID[id] = t
		tt.mu.Unlock()
		return map[string]string{"terminalId": id}, nil
	case "output", "read":
		t, _, err := tt.get(params)
		if err != nil {
			return nil, err
		}
		t.mu.Lock()
		res := map[string]any{"output": string(t.out), "truncated": t.truncated}
		t.mu.Unlock()
		// Not Wait on a cancelled context: its select picks at random
		// between done and cancelled when both are ready.
		select {
		case <-t.proc.Done():
			if st, err := t.proc.Wait(context.Background()); err == nil {
				res["exitStatus"] = exitStatusJSON(st)
			}
		default:
		}
		return res, nil
	case "wait_for_exit", "waitForExit":
		t, _, err := tt.get(params)
		if err != nil {
			return nil, err
		}
		st, err := t.proc.Wait(ctx)
		if err != nil {
			return nil, err
		}
		return exitStatusJSON(st), nil
	case "kill":
		t, _, err := tt.get(params)
		if err != nil {
			return nil, err
		}
		return nil, t.proc.Kill(ctx)
	case "write":
		var p struct {
			TerminalID string `json:"terminalId"`
			Data       string `json:"data"`
		}
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		t, _, err := tt.get(params)
		if err != nil {
			return nil, err
		}
		_, err = t.proc.Write(ctx, []byte(p.Data))
		return nil, err
	case "resize":
		var p struct {
			Cols uint16 `json:"cols"`
			Rows uint16 `json:"rows"`
		}
		if err := decodeParams(params, &p); err != nil {
			return nil, err
		}
		t, _, err := tt.get(params)
		if err != nil {
			return nil, err
		}
		return nil, t.proc.Resize(ctx, p.Cols, p.Rows)
	case "release", "close":
		t, id, err := tt.get(params)
		if err != nil {
			return nil, err
		}
		tt.mu.Lock()
		delete(tt.byID, id)
		tt.mu.Unlock()
		if !t.proc.exited() {
			_ = t.proc.Kill(ctx)
		}
		return nil, nil
	}
	return nil, errMethodNotFound
}

// closeAll forgets every terminal; their processes died with the VM.
func (tt *terminalTable) closeAll() {
	tt.mu.Lock()
	tt.byID = nil
	tt.mu.Unlock()
}

// parseTerminalEnv accepts an object or a list of {name, value}.
func parseTerminalEnv(raw json.RawMessage) (map[string]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err == nil {
		return m, nil
	}
	var list []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, errInvalidParams{msg: fmt.Sprintf("env: %v", err)}
	}
	m = make(map[string]string, len(list))
	for _, kv := range list {
		m[kv.Name] = kv.Value
	}
	return m, nil
}
