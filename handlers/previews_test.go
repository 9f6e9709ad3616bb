package handlers

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestParsePreviewHost(t *testing.T) {
	for _, c := range []struct {
		host, domain string
		port         int
		vm           string
		ok           bool
	}{
		{"8080-vm_abc.preview.test", "preview.test", 8080, "vm_abc", true},
		{"8080-vm_abc.preview.test:9000", "preview.test", 8080, "vm_abc", true},
		{"3000-VM_ABC.Preview.Test", "preview.test", 3000, "vm_abc", true},
		{"8080-vm_abc.preview.test", "", 0, "", false},
		{"preview.test", "preview.test", 0, "", false},
		{"8080-vm_abc.other.test", "preview.test", 0, "", false},
		{"x.8080-vm_abc.preview.test", "preview.test", 0, "", false},
		{"0-vm.preview.test", "preview.test", 0, "", false},
		{"08080-vm.preview.test", "preview.test", 0, "", false},
		{"65536-vm.preview.test", "preview.test", 0, "", false},
		{"8080-.preview.test", "preview.test", 0, "", false},
		{"8080.preview.test", "preview.test", 0, "", false},
		{"-vm.preview.test", "preview.test", 0, "", false},
		{"127.0.0.1:8080", "preview.test", 0, "", false},
	} {
		port, vm, ok := parsePreviewHost(c.host, c.domain)
		if port != c.port || vm != c.vm || ok != c.ok {
			t.Errorf("parsePreviewHost(%q, %q) = %d, %q, %v; want %d, %q, %v", c.host, c.domain, port, vm, ok, c.port, c.vm, c.ok)
		}
	}
}

// FuzzParsePreviewHost feeds arbitrary Host headers: it must never panic,
// and what it accepts is a port in range and a VM id without a dot, which
// put back together name the same host.
func FuzzParsePreviewHost(f *testing.F) {
	for _, seed := range []string{"8080-vm_abc.preview.test", "8080-vm.preview.test:1", "a.b", "", "-.preview.test", "1-a-b.preview.test", "[::1]:80"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, host string) {
		port, vm, ok := parsePreviewHost(host, "preview.test")
		if !ok {
			return
		}
		if port < 1 || port > 65535 || vm == "" || strings.Contains(vm, ".") {
			t.Fatalf("%q: port %d, vm %q", host, port, vm)
		}
		h := strings.ToLower(host)
		if i := strings.LastIndex(h, ":"); i >= 0 && !strings.HasSuffix(h, ".preview.test") {
			h = h[:i]
		}
		if h != strconv.Itoa(port)+"-"+vm+".preview.test" {
			t.Fatalf("%q read as %d-%s", host, port, vm)
		}
	})
}

func TestGuestRequestHeader(t *testing.T) {
	r, _ := http.NewRequest(http.MethodGet, "http://gw/x", nil)
	r.Header = http.Header{
		"Authorization": {"Bearer agk_secret"}, "Connection": {"keep-alive, X-Hop"}, "X-Hop": {"1"},
		"Keep-Alive": {"300"}, "Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"bearer.x"},
		"X-Agentos-Forwarded-By": {"node sig"}, "Cookie": {"agentos_preview=pvt_x; app=1"}, "X-App": {"yes"},
	}
	for _, c := range []struct {
		kind   previewKind
		cookie string
	}{{previewNone, "agentos_preview=pvt_x; app=1"}, {previewPath, ""}, {previewHost, "app=1"}} {
		h := guestRequestHeader(r, guestTarget{preview: c.kind})
		for _, name := range []string{"Authorization", "Connection", "X-Hop", "Keep-Alive", "Upgrade", "Sec-Websocket-Protocol", "X-Agentos-Forwarded-By"} {
			if v := h.Get(name); v != "" {
				t.Errorf("kind %d: %s: %q reaches the guest", c.kind, name, v)
			}
		}
		if h.Get("Cookie") != c.cookie || h.Get("X-App") != "yes" {
			t.Errorf("kind %d: Cookie %q, X-App %q", c.kind, h.Get("Cookie"), h.Get("X-App"))
		}
	}
}
