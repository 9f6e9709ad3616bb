package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, c config) {
			if c.addr != "127.0.0.1:8080" || c.maxSidecars != 4 || c.vmsPerSidecar != 16 || c.minIdleSidecars != 1 ||
				c.sidecarIdleTimeout != 5*time.Minute || c.shutdownGrace != 20*time.Second || c.heartbeat != 15*time.Second ||
				c.storeDSN != "data/gateway.db" || c.logFormat != "json" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "env", env: map[string]string{"AGENTOS_GATEWAY_ADDR": ":9", "AGENTOS_GATEWAY_MAX_SIDECARS": "7", "AGENTOS_GATEWAY_SHUTDOWN_GRACE": "3s", "AGENTOS_GATEWAY_DATA_DIR": "/x"},
			check: func(t *testing.T, c config) {
				if c.addr != ":9" || c.maxSidecars != 7 || c.shutdownGrace != 3*time.Second || c.storeDSN != "/x/gateway.db" {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "flag beats env", args: []string{"--max-sidecars", "2"}, env: map[string]string{"AGENTOS_GATEWAY_MAX_SIDECARS": "7"},
			check: func(t *testing.T, c config) {
				if c.maxSidecars != 2 {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "archive entries", args: []string{"--max-archive-entries=7"}, check: func(t *testing.T, c config) {
			if c.maxArchiveEntries != 7 {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "archive entries default", check: func(t *testing.T, c config) {
			if c.maxArchiveEntries != 100000 {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "bad archive entries", args: []string{"--max-archive-entries=-1"}, wantErr: "max-archive-entries"},
		{name: "bad number", args: []string{"--vms-per-sidecar", "x"}, wantErr: "vms-per-sidecar"},
		{name: "bad duration", env: map[string]string{"AGENTOS_GATEWAY_SIDECAR_IDLE_TIMEOUT": "soon"}, wantErr: "sidecar-idle-timeout"},
		{name: "zero sidecars", args: []string{"--max-sidecars=0"}, wantErr: "at least 1"},
		{name: "log format", args: []string{"--log-format=xml"}, wantErr: "log-format"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}
