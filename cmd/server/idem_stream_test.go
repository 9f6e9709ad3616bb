package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestStreamedExecIdempotency: a streamed exec with an Idempotency-Key runs
// once; its retry, streamed or buffered, gets the recorded result.
func TestStreamedExecIdempotency(t *testing.T) {
	t.Parallel()
	g := startGateway(t, "")
	var vm struct{ ID string }
	if st := call(t, "POST", g.URL+"/v1/vms", testAdminKey, map[string]any{}, &vm); st != 201 {
		t.Fatalf("create: %d", st)
	}
	body := `{"command":"sh -c 'echo ran >> /workspace/count; echo out; echo err >&2'"}`
	stream := func() (string, http.Header) {
		req, _ := http.NewRequest("POST", g.URL+"/v1/vms/"+vm.ID+"/exec", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Idempotency-Key", "stream-once")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var events []string
		sc := bufio.NewScanner(resp.Body)
		var name, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && name != "":
				events = append(events, name+" "+data)
				name, data = "", ""
			}
		}
		return strings.Join(events, "\n"), resp.Header
	}
	first, h1 := stream()
	second, h2 := stream()
	if h1.Get("Idempotent-Replayed") != "" || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("Idempotent-Replayed: first %q, retry %q", h1.Get("Idempotent-Replayed"), h2.Get("Idempotent-Replayed"))
	}
	for _, evs := range []string{first, second} {
		if !strings.Contains(evs, `"data":"out\n"`) || !strings.Contains(evs, `"data":"err\n"`) || !strings.Contains(evs, "exit {") {
			t.Fatalf("events:\n%s", evs)
		}
	}
	// The buffered form with the same key and body gets the same record.
	req, _ := http.NewRequest("POST", g.URL+"/v1/vms/"+vm.ID+"/exec", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	req.Header.Set("Idempotency-Key", "stream-once")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var res struct{ Stdout, Stderr string }
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.Header.Get("Idempotent-Replayed") != "true" || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("buffered replay: %q %+v", resp.Header.Get("Idempotent-Replayed"), res)
	}
	var count struct{ Stdout string }
	call(t, "POST", g.URL+"/v1/vms/"+vm.ID+"/exec", testAdminKey, map[string]any{"command": "cat /workspace/count"}, &count)
	if n := bytes.Count([]byte(count.Stdout), []byte("ran")); n != 1 {
		t.Fatalf("the command ran %d times", n)
	}
}
