package cluster

import (
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	a := &Node{cfg: Config{ID: "n1", Secret: []byte("s3cret-s3cret-s3cret")}}
	b := &Node{cfg: Config{ID: "n2", Secret: []byte("s3cret-s3cret-s3cret")}}
	other := &Node{cfg: Config{ID: "n3", Secret: []byte("another-secret-entirely")}}
	none := &Node{cfg: Config{ID: "n4"}}
	signed := func() string {
		r := httptest.NewRequest("POST", "/v1/vms/vm_1/exec?x=1", nil)
		a.Sign(r)
		return r.Header.Get(ForwardedHeader)
	}
	for _, tc := range []struct {
		name     string
		verifier *Node
		method   string
		target   string
		header   func() string
		ok       bool
	}{
		{"same secret", b, "POST", "/v1/vms/vm_1/exec?x=1", func() string { return signed() }, true},
		{"another secret", other, "POST", "/v1/vms/vm_1/exec?x=1", func() string { return signed() }, false},
		{"receiver without secret", none, "POST", "/v1/vms/vm_1/exec?x=1", func() string { return signed() }, false},
		{"moved to another path", b, "POST", "/v1/vms/vm_2/exec?x=1", func() string { return signed() }, false},
		{"moved to another method", b, "GET", "/v1/vms/vm_1/exec?x=1", func() string { return signed() }, false},
		{"another sender named", b, "POST", "/v1/vms/vm_1/exec?x=1", func() string { return "n9" + strings.TrimPrefix(signed(), "n1") }, false},
		{"stale", b, "POST", "/v1/vms/vm_1/exec", func() string {
			at := time.Now().Add(-2 * time.Minute).Unix()
			mac := sign(a.cfg.Secret, signedText("n1", at, "POST", "/v1/vms/vm_1/exec"))
			return "n1 " + strconv.FormatInt(at, 10) + " " + b64(mac)
		}, false},
		{"garbage", b, "POST", "/", func() string { return "hello" }, false},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		r.Header.Set(ForwardedHeader, tc.header())
		node, err := tc.verifier.Verify(r)
		if tc.ok && (err != nil || node != "n1") {
			t.Errorf("%s: Verify = %q, %v; want n1", tc.name, node, err)
		}
		if !tc.ok && !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s: Verify = %q, %v; want ErrBadSignature", tc.name, node, err)
		}
	}
	if secretCheck(a.cfg.Secret) != secretCheck(b.cfg.Secret) || secretCheck(a.cfg.Secret) == secretCheck(other.cfg.Secret) || secretCheck(nil) != "" {
		t.Error("secretCheck does not tell secrets apart")
	}
}

func FuzzParseForwarded(f *testing.F) {
	n := &Node{cfg: Config{ID: "n1", Secret: []byte("k")}}
	r := httptest.NewRequest("GET", "/", nil)
	n.Sign(r)
	f.Add(r.Header.Get(ForwardedHeader))
	f.Add("n1 0 x")
	f.Add("  ")
	f.Fuzz(func(t *testing.T, v string) {
		got, err := parseForwarded(v)
		if err != nil {
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("error %v is not ErrBadSignature", err)
			}
			return
		}
		if !validNodeID(got.node) || got.at <= 0 || len(got.sig) != 32 {
			t.Fatalf("accepted %q as %+v", v, got)
		}
	})
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
