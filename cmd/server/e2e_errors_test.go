package main

// Every error code of the API, with its status and problem document, against
// a real gateway. (unavailable, a call in flight when its sidecar dies, is
// asserted by TestE2ESidecarCrash; internal is not reachable from outside
// without a fault injected, see TestE2EErrorCodes.)

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

func TestE2EErrorCodes(t *testing.T) {
	t.Parallel()
	const maxBody, maxFile = 4096, 1024
	e := newE2E(t, fmt.Sprintf("--max-body-bytes=%d", maxBody), fmt.Sprintf("--max-file-bytes=%d", maxFile))
	ctx := ctxT(t)
	a := e.admin
	tn, tenantC := e.tenant("limited", &client.Quotas{MaxVMs: 1})
	vm := e.vm(a, client.CreateVMRequest{})
	gone := e.vm(a, client.CreateVMRequest{})
	if _, err := a.VM(gone.ID).Delete(ctx); err != nil {
		t.Fatal(err)
	}
	exited, err := a.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "true"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.VM(vm.ID).Process(exited.Pid()).Wait(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sleeper, err := a.VM(vm.ID).Spawn(ctx, client.SpawnRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.VM(vm.ID).WriteFile(ctx, "/workspace/dir/file", strings.NewReader("x"), client.WriteFileOptions{Mkdirs: true}); err != nil {
		t.Fatal(err)
	}
	tenantVM := e.vm(tenantC, client.CreateVMRequest{})
	anon := e.client("")
	wrong := e.client("agk_wrong_0123456789abcdefghijklmnopqrstu")
	vmPath := "/v1/vms/" + vm.ID
	jsonCT := map[string]string{"Content-Type": "application/json"}
	stream := func(s *client.Stream, err error) error {
		if s != nil {
			s.Close()
		}
		return err
	}
	type call func() error
	tests := []struct {
		code   client.Code
		status int
		name   string
		do     call
		check  func(t *testing.T, e *client.Error)
	}{
		// invalid_argument
		{client.CodeInvalidArgument, 400, "unknown field", func() error {
			return e.raw("POST", "/v1/vms", testAdminKey, strings.NewReader(`{"labels":{},"bogus":1}`), jsonCT)
		}, fieldIs("bogus")},
		{client.CodeInvalidArgument, 400, "bad JSON", func() error {
			return e.raw("POST", "/v1/vms", testAdminKey, strings.NewReader(`{"labels":`), jsonCT)
		}, nil},
		{client.CodeInvalidArgument, 400, "wrong JSON type", func() error {
			return e.raw("POST", "/v1/vms", testAdminKey, strings.NewReader(`{"idleTimeoutSeconds":"soon"}`), jsonCT)
		}, fieldIs("idleTimeoutSeconds")},
		{client.CodeInvalidArgument, 400, "two JSON objects", func() error {
			return e.raw("POST", vmPath+"/exec", testAdminKey, strings.NewReader(`{"command":"true"} {}`), jsonCT)
		}, nil},
		{client.CodeInvalidArgument, 400, "empty body", func() error {
			return e.raw("POST", vmPath+"/exec", testAdminKey, nil, jsonCT)
		}, nil},
		{client.CodeInvalidArgument, 400, "validation", func() error {
			// The client cannot send a negative timeout.
			return e.raw("POST", "/v1/vms", testAdminKey, strings.NewReader(`{"idleTimeoutSeconds":-1}`), jsonCT)
		}, fieldIs("idleTimeoutSeconds")},
		{client.CodeInvalidArgument, 400, "unknown limits section", func() error {
			_, err := a.CreateVM(ctx, client.CreateVMRequest{Limits: map[string]any{"bogus": 1}})
			return err
		}, fieldIs("limits.bogus")},
		{client.CodeInvalidArgument, 400, "path with ..", func() error {
			_, err := a.VM(vm.ID).ReadFile(ctx, "/workspace/../etc/passwd")
			return err
		}, fieldIs("path")},
		{client.CodeInvalidArgument, 400, "path with NUL", func() error {
			_, err := a.VM(vm.ID).Stat(ctx, "/workspace/a\x00b")
			return err
		}, fieldIs("path")},
		{client.CodeInvalidArgument, 400, "relative path", func() error {
			_, err := a.VM(vm.ID).WriteFile(ctx, "workspace/x", strings.NewReader("x"), client.WriteFileOptions{})
			return err
		}, fieldIs("path")},
		{client.CodeInvalidArgument, 400, "missing path", func() error {
			return e.raw("GET", vmPath+"/dirs", testAdminKey, nil, nil)
		}, fieldIs("path")},
		{client.CodeInvalidArgument, 400, "relative mkdir", func() error { return a.VM(vm.ID).Mkdir(ctx, "tmp/x") }, nil},
		{client.CodeInvalidArgument, 400, "move with ..", func() error { return a.VM(vm.ID).Move(ctx, "/workspace/dir", "/workspace/../x") }, nil},
		{client.CodeInvalidArgument, 400, "exec without command", func() error {
			_, err := a.VM(vm.ID).Exec(ctx, client.ExecRequest{})
			return err
		}, nil},
		{client.CodeInvalidArgument, 400, "relative cwd", func() error {
			_, err := a.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "true", Cwd: "tmp"})
			return err
		}, fieldIs("cwd")},
		{client.CodeInvalidArgument, 400, "unknown signal", func() error { return a.VM(vm.ID).Process(sleeper.Pid()).Signal(ctx, "SIGNOPE") }, fieldIs("signal")},
		{client.CodeInvalidArgument, 400, "bad pid", func() error { return e.raw("GET", vmPath+"/processes/abc", testAdminKey, nil, nil) }, fieldIs("pid")},
		{client.CodeInvalidArgument, 400, "bad Last-Event-ID", func() error {
			return stream(a.VM(vm.ID).Process(sleeper.Pid()).Output(ctx, client.StreamOptions{LastEventID: "abc"}))
		}, nil},
		{client.CodeInvalidArgument, 400, "unknown state filter", func() error {
			_, err := a.ListVMs(ctx, client.ListVMsOptions{States: []client.VMState{"sleeping"}})
			return err
		}, fieldIs("state")},
		{client.CodeInvalidArgument, 400, "Idempotency-Key too long on a streamed exec", func() error {
			return e.raw("POST", vmPath+"/exec", testAdminKey, strings.NewReader(`{"command":"true"}`),
				map[string]string{"Content-Type": "application/json", "Accept": "text/event-stream", "Idempotency-Key": strings.Repeat("k", 256)})
		}, nil},
		{client.CodeMethodNotAllowed, 405, "method not allowed", func() error { return e.raw("PUT", "/v1/vms", testAdminKey, nil, nil) }, nil},
		// unauthenticated
		{client.CodeUnauthenticated, 401, "no key", func() error {
			_, err := anon.VM(vm.ID).Get(ctx)
			return err
		}, nil},
		{client.CodeUnauthenticated, 401, "wrong key", func() error {
			_, err := wrong.ListVMs(ctx, client.ListVMsOptions{})
			return err
		}, nil},
		{client.CodeUnauthenticated, 401, "not a bearer token", func() error {
			return e.raw("GET", "/v1/vms", "", nil, map[string]string{"Authorization": "Basic " + testAdminKey})
		}, nil},
		// permission_denied
		{client.CodePermissionDenied, 403, "tenant key lists tenants", func() error {
			_, err := tenantC.ListTenants(ctx, client.ListOptions{})
			return err
		}, nil},
		{client.CodePermissionDenied, 403, "tenant key creates a tenant", func() error {
			_, err := tenantC.CreateTenant(ctx, client.TenantCreate{Name: "x"})
			return err
		}, nil},
		{client.CodePermissionDenied, 403, "tenant key creates a key for itself", func() error {
			_, err := tenantC.CreateKey(ctx, tn.ID)
			return err
		}, nil},
		{client.CodePermissionDenied, 403, "tenant key lists sidecars", func() error {
			_, err := tenantC.Sidecars(ctx)
			return err
		}, nil},
		// not_found
		{client.CodeNotFound, 404, "unknown VM", func() error {
			_, err := a.VM("vm_nope").Get(ctx)
			return err
		}, nil},
		{client.CodeNotFound, 404, "unknown process", func() error {
			_, err := a.VM(vm.ID).Process(999999).Get(ctx)
			return err
		}, nil},
		{client.CodeNotFound, 404, "unknown shell", func() error { return a.VM(vm.ID).Shell("sh_nope").Input(ctx, []byte("x")) }, nil},
		{client.CodeNotFound, 404, "missing file", func() error {
			_, err := a.VM(vm.ID).ReadFile(ctx, "/workspace/nope")
			return err
		}, nil},
		{client.CodeNotFound, 404, "unknown tenant", func() error {
			_, err := a.GetTenant(ctx, "nope")
			return err
		}, nil},
		{client.CodeNotFound, 404, "unknown key", func() error { return a.DeleteKey(ctx, tn.ID, "nope") }, nil},
		{client.CodeNotFound, 404, "unknown route", func() error { return e.raw("GET", "/v1/nope", testAdminKey, nil, nil) }, nil},
		{client.CodeNotFound, 404, "another tenant's VM", func() error {
			_, err := a.VM(tenantVM.ID).Get(ctx)
			return err
		}, nil},
		// conflict
		{client.CodeConflict, 409, "exec on a disposed VM", func() error {
			_, err := a.VM(gone.ID).Exec(ctx, client.ExecRequest{Command: "true"})
			return err
		}, stateIs("disposed")},
		{client.CodeConflict, 409, "streamed exec on a disposed VM", func() error {
			return stream(a.VM(gone.ID).ExecStream(ctx, client.ExecRequest{Command: "true"}))
		}, stateIs("disposed")},
		{client.CodeConflict, 409, "events of a disposed VM", func() error {
			return stream(a.VM(gone.ID).Events(ctx, client.StreamOptions{}))
		}, stateIs("disposed")},
		{client.CodeConflict, 409, "write a file of a disposed VM", func() error {
			_, err := a.VM(gone.ID).WriteFile(ctx, "/workspace/x", strings.NewReader("x"), client.WriteFileOptions{})
			return err
		}, stateIs("disposed")},
		{client.CodeConflict, 409, "signal an exited process", func() error { return a.VM(vm.ID).Process(exited.Pid()).Signal(ctx, "SIGTERM") }, stateIs("exited")},
		{client.CodeConflict, 409, "stdin of an exited process", func() error { return a.VM(vm.ID).Process(exited.Pid()).WriteStdin(ctx, []byte("x")) }, stateIs("exited")},
		{client.CodeConflict, 409, "delete a non-empty directory", func() error {
			return a.VM(vm.ID).DeleteFile(ctx, "/workspace/dir", client.DeleteFileOptions{Recursive: false})
		}, nil},
		// payload_too_large
		{client.CodePayloadTooLarge, 413, "JSON body", func() error {
			_, err := a.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "cat", Stdin: bytes.Repeat([]byte("x"), maxBody)})
			return err
		}, nil},
		{client.CodePayloadTooLarge, 413, "raw stdin", func() error {
			return a.VM(vm.ID).Process(sleeper.Pid()).WriteStdin(ctx, bytes.Repeat([]byte("x"), maxBody+1))
		}, nil},
		{client.CodePayloadTooLarge, 413, "file with Content-Length", func() error {
			_, err := a.VM(vm.ID).WriteFile(ctx, "/workspace/big", bytes.NewReader(make([]byte, maxFile+1)), client.WriteFileOptions{})
			return err
		}, nil},
		{client.CodePayloadTooLarge, 413, "chunked file", func() error {
			// A reader of unknown length travels chunked: the limit is
			// enforced while streaming.
			_, err := a.VM(vm.ID).WriteFile(ctx, "/workspace/big", io.MultiReader(bytes.NewReader(make([]byte, 4*maxFile))), client.WriteFileOptions{})
			return err
		}, nil},
		// unprocessable
		{client.CodeUnprocessable, 422, "Idempotency-Key reused for another request", func() error {
			key := client.WithIdempotencyKey(e.uniq("reuse"))
			if _, err := a.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "true"}, key); err != nil {
				return err
			}
			_, err := a.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "false"}, key)
			return err
		}, nil},
		// resource_exhausted
		{client.CodeResourceExhausted, 429, "tenant maxVms", func() error {
			_, err := tenantC.CreateVM(ctx, client.CreateVMRequest{})
			return err
		}, quotaIs("maxVms")},
		// deadline_exceeded
		{client.CodeDeadlineExceeded, 504, "exec timeoutMs", func() error {
			_, err := a.VM(vm.ID).Exec(ctx, client.ExecRequest{Command: "sleep 30", Timeout: 300 * time.Millisecond})
			return err
		}, nil},
		{client.CodeDeadlineExceeded, 504, "wait timeoutMs", func() error {
			_, err := a.VM(vm.ID).Process(sleeper.Pid()).Wait(ctx, 100*time.Millisecond)
			return err
		}, nil},
	}
	seen := map[client.Code]bool{}
	for _, tc := range tests {
		t.Run(string(tc.code)+"/"+tc.name, func(t *testing.T) {
			err := tc.do()
			ce := wantCode(t, err, tc.code, tc.status)
			if tc.check != nil {
				tc.check(t, ce)
			}
			seen[tc.code] = true
		})
	}

	// Nothing of the refused uploads is left behind.
	_, err = a.VM(vm.ID).Stat(ctx, "/workspace/big")
	wantCode(t, err, client.CodeNotFound, 404)
	if l, err := a.VM(vm.ID).ListDir(ctx, "/workspace", client.ListDirOptions{Recursive: false, MaxDepth: 0}); err != nil || len(l) != 1 {
		t.Fatalf("/workspace after refused uploads: %+v %v", l, err)
	}
	// The VM and the gateway are fine after all that.
	if out := e.exec(a, vm.ID, "echo still-ok"); out != "still-ok\n" {
		t.Fatalf("%q", out)
	}
	for _, code := range []client.Code{client.CodeInvalidArgument, client.CodeUnauthenticated, client.CodePermissionDenied, client.CodeNotFound,
		client.CodeConflict, client.CodePayloadTooLarge, client.CodeUnprocessable, client.CodeResourceExhausted, client.CodeDeadlineExceeded,
		client.CodeMethodNotAllowed} {
		if !seen[code] {
			t.Errorf("code %s was not exercised", code)
		}
	}
	// internal: every path to a 500 found from the outside was a bug (an
	// engine rejection of the VM's limits was one; it is invalid_argument
	// now). It needs a fault injected, which an end-to-end test cannot do.
	t.Log("internal (500): not reachable through the API without injecting a fault; not exercised here")
}

// TestE2EPoolFull: with one sidecar of one VM, a second create is
// resource_exhausted until the first VM is gone.
func TestE2EPoolFull(t *testing.T) {
	t.Parallel()
	e := newE2E(t, "--max-sidecars=1", "--vms-per-sidecar=1")
	ctx := ctxT(t)
	vm := e.vm(e.admin, client.CreateVMRequest{})
	_, err := e.admin.CreateVM(ctx, client.CreateVMRequest{})
	wantCode(t, err, client.CodeResourceExhausted, http.StatusTooManyRequests)
	// The failed create left no record behind.
	l, err := e.admin.ListVMs(ctx, client.ListVMsOptions{States: []client.VMState{client.VMCreating, client.VMReady, client.VMDisposing, client.VMDisposed, client.VMLost}})
	if err != nil || len(l.Items) != 1 || l.Items[0].ID != vm.ID {
		t.Fatalf("VMs after a failed create: %+v %v", l, err)
	}
	if _, err := e.admin.VM(vm.ID).Delete(ctx); err != nil {
		t.Fatal(err)
	}
	vm2 := e.vm(e.admin, client.CreateVMRequest{})
	if out := e.exec(e.admin, vm2.ID, "echo ok"); out != "ok\n" {
		t.Fatalf("%q", out)
	}
}

func fieldIs(field string) func(*testing.T, *client.Error) {
	return func(t *testing.T, e *client.Error) {
		t.Helper()
		if e.Details["field"] != field {
			t.Fatalf("details.field = %v, want %q (%v)", e.Details["field"], field, e)
		}
	}
}

func stateIs(state string) func(*testing.T, *client.Error) {
	return func(t *testing.T, e *client.Error) {
		t.Helper()
		if e.Details["state"] != state {
			t.Fatalf("details.state = %v, want %q (%v)", e.Details["state"], state, e)
		}
	}
}

func quotaIs(quota string) func(*testing.T, *client.Error) {
	return func(t *testing.T, e *client.Error) {
		t.Helper()
		if e.Details["quota"] != quota {
			t.Fatalf("details.quota = %v, want %q (%v)", e.Details["quota"], quota, e)
		}
	}
}
