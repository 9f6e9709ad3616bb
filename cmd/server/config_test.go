package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, c config) {
			if c.addr != "127.0.0.1:8080" || c.maxSidecars != 4 || c.vmsPerSidecar != 64 || c.minIdleSidecars != 1 ||
				c.sidecarIdleTimeout != 5*time.Minute || c.shutdownGrace != 20*time.Second || c.heartbeat != 15*time.Second || c.memoryReturn != 5*time.Second ||
				c.dataDir != filepath.Join(wd, "data") || c.storeDSN != filepath.Join(wd, "data", "gateway.db") || c.logFormat != "json" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "env", env: map[string]string{"AGENTOS_GATEWAY_ADDR": ":9", "AGENTOS_GATEWAY_MAX_SIDECARS": "7", "AGENTOS_GATEWAY_SHUTDOWN_GRACE": "3s", "AGENTOS_GATEWAY_DATA_DIR": "/x"},
			check: func(t *testing.T, c config) {
				if c.addr != ":9" || c.maxSidecars != 7 || c.shutdownGrace != 3*time.Second || c.storeDSN != "/x/gateway.db" {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "memory return off", args: []string{"--memory-return-interval", "0"}, check: func(t *testing.T, c config) {
			if c.memoryReturn != 0 {
				t.Fatalf("memoryReturn %v", c.memoryReturn)
			}
		}},
		{name: "memory return not a duration", args: []string{"--memory-return-interval", "-1s"}, wantErr: "memory-return-interval"},
		{name: "relative data dir made absolute", args: []string{"--data-dir", "x/../state"}, check: func(t *testing.T, c config) {
			if c.dataDir != filepath.Join(wd, "state") || c.storeDSN != filepath.Join(wd, "state", "gateway.db") {
				t.Fatalf("dataDir %q, storeDSN %q", c.dataDir, c.storeDSN)
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
		{name: "density defaults", check: func(t *testing.T, c config) {
			if c.warmVMs != 4 || c.placement != "pack" || c.vmsPerSidecar != 64 || c.memoryHighWater != 768<<20 {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "warm VMs and placement", args: []string{"--warm-vms=3", "--placement=spread"}, check: func(t *testing.T, c config) {
			if c.warmVMs != 3 || c.placement != "spread" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "bad placement", args: []string{"--placement=random"}, wantErr: "--placement"},
		{name: "bad warm VMs", env: map[string]string{"AGENTOS_GATEWAY_WARM_VMS": "-1"}, wantErr: "warm-vms"},
		{name: "bad number", args: []string{"--vms-per-sidecar", "x"}, wantErr: "vms-per-sidecar"},
		{name: "bad duration", env: map[string]string{"AGENTOS_GATEWAY_SIDECAR_IDLE_TIMEOUT": "soon"}, wantErr: "sidecar-idle-timeout"},
		{name: "zero sidecars", args: []string{"--max-sidecars=0"}, wantErr: "at least 1"},
		{name: "log format", args: []string{"--log-format=xml"}, wantErr: "log-format"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "nope"},
		{name: "node defaults", check: func(t *testing.T, c config) {
			host, _ := os.Hostname()
			if c.nodeID != host || c.advertiseAddr != "" || c.nodeHeartbeat != 2*time.Second || c.nodeTimeout != 10*time.Second {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "node flags", args: []string{"--node-id", "gw-0", "--advertise-addr", "http://gw-0.gw:8080/", "--node-heartbeat", "1s", "--node-timeout", "5s"},
			check: func(t *testing.T, c config) {
				if c.nodeID != "gw-0" || c.advertiseAddr != "http://gw-0.gw:8080" || c.nodeHeartbeat != time.Second || c.nodeTimeout != 5*time.Second {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "node id from env", env: map[string]string{"AGENTOS_GATEWAY_NODE_ID": "gw-1"}, check: func(t *testing.T, c config) {
			if c.nodeID != "gw-1" {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "bad node id", args: []string{"--node-id", "gw 0"}, wantErr: "node-id"},
		{name: "bad advertise address", args: []string{"--advertise-addr", "gw-0:8080"}, wantErr: "advertise-addr"},
		{name: "advertise address with a path", args: []string{"--advertise-addr", "http://gw-0/x"}, wantErr: "advertise-addr"},
		{name: "timeout not above heartbeat", args: []string{"--node-heartbeat", "5s", "--node-timeout", "5s"}, wantErr: "node-timeout"},
		{name: "preview domain from env, lower-cased", env: map[string]string{"AGENTOS_GATEWAY_PREVIEW_DOMAIN": ".Preview.Example.com."}, check: func(t *testing.T, c config) {
			if c.previewDomain != "preview.example.com" {
				t.Fatalf("previewDomain %q", c.previewDomain)
			}
		}},
		{name: "bad preview domain", args: []string{"--preview-domain", "preview.example.com:8080"}, wantErr: "preview-domain"},
		{name: "preview domain with an empty label", args: []string{"--preview-domain", "a..b"}, wantErr: "preview-domain"},
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

func TestAdvertiseFrom(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, "http://127.0.0.1:8080"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, "http://" + net.JoinHostPort(host, "8080")},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 9}, "http://" + net.JoinHostPort(host, "9")},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 9}, "http://[::1]:9"},
	} {
		if got := advertiseFrom(tc.addr); got != tc.want {
			t.Errorf("advertiseFrom(%s) = %q; want %q", tc.addr, got, tc.want)
		}
	}
}
