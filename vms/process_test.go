package vms_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/store"
	"github.com/agentos-gateway/agentos-gateway/vms"
)

// TestExecTimeout: no deadline, or 0, is the configured default; above the
// maximum is refused, naming the field and the maximum; a default above
// the maximum is lowered to it.
func TestExecTimeout(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	newSvc := func(cfg vms.Config) *vms.Service {
		cfg.DataDir = t.TempDir()
		svc := vms.New(cfg, db, nil)
		t.Cleanup(func() {
			if err := svc.Close(ctx); err != nil {
				t.Error(err)
			}
		})
		return svc
	}
	for _, tc := range []struct {
		name      string
		cfg       vms.Config
		requested time.Duration
		want      time.Duration
		refused   bool
	}{
		{name: "built-in default", want: 10 * time.Minute},
		{name: "built-in maximum", requested: time.Hour, want: time.Hour},
		{name: "above the built-in maximum", requested: time.Hour + time.Millisecond, refused: true},
		{name: "configured default", cfg: vms.Config{ExecTimeoutDefault: 2 * time.Second, ExecTimeoutMax: 5 * time.Second}, want: 2 * time.Second},
		{name: "asked for", cfg: vms.Config{ExecTimeoutDefault: 2 * time.Second, ExecTimeoutMax: 5 * time.Second}, requested: 4 * time.Second, want: 4 * time.Second},
		{name: "above the configured maximum", cfg: vms.Config{ExecTimeoutDefault: 2 * time.Second, ExecTimeoutMax: 5 * time.Second}, requested: 6 * time.Second, refused: true},
		{name: "default above the maximum", cfg: vms.Config{ExecTimeoutDefault: time.Hour, ExecTimeoutMax: time.Minute}, want: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newSvc(tc.cfg).ExecTimeout(tc.requested)
			var ge *gateway.Error
			switch {
			case tc.refused:
				if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != "timeoutMs" || ge.Details["maximum"] == nil {
					t.Fatalf("err %v, want invalid_argument on timeoutMs", err)
				}
			case err != nil || got != tc.want:
				t.Fatalf("ExecTimeout(%s) = %s, %v; want %s", tc.requested, got, err, tc.want)
			}
		})
	}
}
