package main

import (
	"bytes"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
)

// TestSharedSidecarSurvivesOversizedRequests sends, through the gateway, each
// request the pinned sidecar is known to choke on when it arrives whole: a
// single 12 MiB+ file write makes it exit (every VM on it lost) and an 8 MiB+
// read is refused. The gateway splits them, so the sidecar and its other VMs
// must come out unharmed.
func TestSharedSidecarSurvivesOversizedRequests(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("moves 48 MiB through a VM")
	}
	g := startGateway(t, "", "--max-sidecars=1", "--max-body-bytes=4194304")
	var vmA, vmB struct{ ID, State string }
	if st := call(t, "POST", g.URL+"/v1/vms", testAdminKey, map[string]any{"limits": map[string]any{"resources": map[string]any{"maxFilesystemBytes": 256 << 20}}}, &vmA); st != 201 {
		t.Fatalf("create: %d", st)
	}
	if st := call(t, "POST", g.URL+"/v1/vms", testAdminKey, map[string]any{}, &vmB); st != 201 {
		t.Fatalf("create: %d", st)
	}
	var before struct {
		Items []struct {
			ID  string
			Pid int
		}
	}
	call(t, "GET", g.URL+"/v1/sidecars", testAdminKey, nil, &before)

	// 24 MiB up and down: twice the write that kills the sidecar, three
	// times the read it refuses.
	data := make([]byte, 24<<20)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(data)
	want := sha256.Sum256(data)
	req, _ := http.NewRequest("PUT", g.URL+"/v1/vms/"+vmA.ID+"/files?path=/workspace/big.bin", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("put: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("GET", g.URL+"/v1/vms/"+vmA.ID+"/files?path=/workspace/big.bin", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || n != int64(len(data)) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("get: %d bytes, %v, sha match %v", n, err, bytes.Equal(h.Sum(nil), want[:]))
	}

	// More stdin than the engine delivers reliably is refused, not passed
	// on to wedge the process (agentos.MaxStdinWrite).
	stdin := bytes.Repeat([]byte("x"), 1<<20)
	var problem struct{ Code string }
	if st := call(t, "POST", g.URL+"/v1/vms/"+vmA.ID+"/exec", testAdminKey, map[string]any{"command": "wc -c", "stdin": string(stdin)}, &problem); st != 400 || problem.Code != "invalid_argument" {
		t.Fatalf("exec with 1 MiB stdin: %d %+v", st, problem)
	}

	var after struct {
		Items []struct {
			ID  string
			Pid int
		}
	}
	call(t, "GET", g.URL+"/v1/sidecars", testAdminKey, nil, &after)
	if len(after.Items) != 1 || len(before.Items) != 1 || after.Items[0].Pid != before.Items[0].Pid {
		t.Fatalf("sidecars before %+v, after %+v: the shared sidecar was replaced", before.Items, after.Items)
	}
	for _, id := range []string{vmA.ID, vmB.ID} {
		var vm struct{ State string }
		call(t, "GET", g.URL+"/v1/vms/"+id, testAdminKey, nil, &vm)
		if vm.State != "ready" {
			t.Fatalf("vm %s is %s", id, vm.State)
		}
	}
}
