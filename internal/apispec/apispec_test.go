package apispec

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// recorder is a testing.TB that records the errors reported to it.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.errs
	r.errs = nil
	return out
}

const validProblem = `{"type":"urn:agentos-gateway:problem:not_found","title":"Not Found","status":404,` +
	`"detail":"vm x not found","instance":"/v1/vms/x","code":"not_found","requestId":"abc"}`

// fakeGateway answers a few routes of the API, correctly or not.
func fakeGateway() http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, ct string, status int, body string) {
		w.Header().Set("Content-Type", ct)
		w.Header().Set("X-Request-ID", "abc")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("mode") {
		case "bad-body":
			writeJSON(w, "application/json", 200, `{"status":"sick"}`)
		case "extra-field":
			writeJSON(w, "application/json", 200, `{"status":"ok","uptime":3}`)
		case "bad-status":
			writeJSON(w, "application/json", http.StatusTeapot, `{"status":"ok"}`)
		case "bad-type":
			writeJSON(w, "text/html", 200, `<p>ok</p>`)
		default:
			writeJSON(w, "application/json", 200, `{"status":"ok"}`)
		}
	})
	mux.HandleFunc("GET /v1/vms/{vm}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("vm") {
		case "bad-code":
			writeJSON(w, "application/problem+json", 404, strings.Replace(validProblem, `"code":"not_found"`, `"code":"nope"`, 1))
		case "no-request-id":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, validProblem)
		default:
			writeJSON(w, "application/problem+json", 404, validProblem)
		}
	})
	mux.HandleFunc("GET /v1/vms/{vm}/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "id: 1\nevent: state\ndata: {\"type\":\"state\",\"time\":\"2026-01-02T03:04:05Z\",\"state\":\"ready\"}\n\n")
		_, _ = io.WriteString(w, "id: 1\nevent: error\ndata: {\"code\":\"conflict\",\"detail\":\"the VM is disposed\"}\n\n")
	})
	mux.HandleFunc("POST /v1/vms/{vm}/processes/{pid}/stdin/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-ID", "abc")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("mode") == "plain" {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, "application/problem+json", 404, validProblem)
	})
	return mux
}

func TestTransport(t *testing.T) {
	doc := MustLoad(t)
	srv := httptest.NewServer(fakeGateway())
	t.Cleanup(srv.Close)
	rec := &recorder{TB: t}
	client := &http.Client{Transport: Transport(rec, doc, nil)}

	for _, c := range []struct {
		method, path string
		wantErr      string // "" for a valid response
	}{
		{"GET", "/healthz", ""},
		{"GET", "/healthz?mode=bad-body", "doesn't match schema"},
		{"GET", "/healthz?mode=extra-field", "uptime"},
		{"GET", "/healthz?mode=bad-status", "status 418 is not documented"},
		{"GET", "/healthz?mode=bad-type", `Content-Type "text/html" is not documented`},
		{"GET", "/v1/vms/vm_1", ""},
		{"GET", "/v1/vms/bad-code", "nope"},
		{"GET", "/v1/vms/no-request-id", "X-Request-ID"},
		{"POST", "/v1/vms/vm_1/processes/7/stdin/close", ""},
		{"GET", "/v1/no-such-route", ""},
		{"GET", "/v1/no-such-route?mode=plain", "want application/problem+json"},
		{"PATCH", "/v1/vms", ""}, // a method the path lacks: a problem is right
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusNoContent && len(body) == 0 {
				t.Errorf("the body was not handed back to the caller")
			}
			errs := rec.take()
			switch {
			case c.wantErr == "" && len(errs) > 0:
				t.Errorf("valid response reported: %v", errs)
			case c.wantErr != "" && len(errs) == 0:
				t.Errorf("invalid response not reported (want %q)", c.wantErr)
			case c.wantErr != "" && !strings.Contains(strings.Join(errs, "\n"), c.wantErr):
				t.Errorf("reported %v, want it to mention %q", errs, c.wantErr)
			}
		})
	}
}

// An event stream is handed over unread; its events can be checked one by
// one with CheckEvent.
func TestTransportEventStream(t *testing.T) {
	doc := MustLoad(t)
	srv := httptest.NewServer(fakeGateway())
	t.Cleanup(srv.Close)
	rec := &recorder{TB: t}
	client := &http.Client{Transport: Transport(rec, doc, nil)}

	req, _ := http.NewRequest("GET", srv.URL+"/v1/vms/vm_1/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if errs := rec.take(); len(errs) > 0 {
		t.Errorf("valid stream reported: %v", errs)
	}
	var names []string
	sc := bufio.NewScanner(resp.Body)
	var event string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			names = append(names, event)
			if err := CheckEvent(doc, req, event, []byte(v)); err != nil {
				t.Errorf("valid event %q reported: %v", event, err)
			}
		}
	}
	if strings.Join(names, ",") != "state,error" {
		t.Errorf("events %v, want state,error", names)
	}

	for _, c := range []struct{ event, data, want string }{
		{"state", `{"type":"state","time":"2026-01-02T03:04:05Z","state":"sleeping"}`, "sleeping"},
		{"error", `{"code":"conflict"}`, "detail"},
		{"stdout", `{}`, "not documented"},
		{"state", `not json`, "not JSON"},
	} {
		err := CheckEvent(doc, req, c.event, []byte(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckEvent(%s, %s) = %v, want an error mentioning %q", c.event, c.data, err, c.want)
		}
	}
}

// Check is the function under Transport; an undocumented status on a
// documented operation and a stream with the wrong content type are errors.
func TestCheck(t *testing.T) {
	doc := MustLoad(t)
	req := httptest.NewRequest("GET", "/v1/vms/vm_1/events", nil)
	h := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"x"}}
	if err := Check(doc, req, 200, h, []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "not documented") {
		t.Errorf("JSON answer to an event stream: %v", err)
	}
	h = http.Header{"Content-Type": {"text/event-stream"}}
	if err := Check(doc, req, 200, h, nil); err != nil {
		t.Errorf("event stream: %v", err)
	}
	head := httptest.NewRequest("HEAD", "/v1/vms/vm_1/files?path=/a", nil)
	if err := Check(doc, head, 404, http.Header{}, nil); err != nil {
		t.Errorf("HEAD 404: %v", err)
	}
	if err := Check(doc, head, 418, http.Header{}, nil); err == nil {
		t.Errorf("HEAD 418 not reported")
	}
	// Raw file bytes of any type.
	get := httptest.NewRequest("GET", "/v1/vms/vm_1/files?path=/a.txt", nil)
	h = http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "Content-Length": {"2"}}
	if err := Check(doc, get, 200, h, []byte("hi")); err != nil {
		t.Errorf("file bytes: %v", err)
	}
	// A .json file is bytes too: only a wildcard documents it.
	get = httptest.NewRequest("GET", "/v1/vms/vm_1/files?path=/a.json", nil)
	h = http.Header{"Content-Type": {"application/json"}}
	if err := Check(doc, get, 200, h, []byte(`{"a":1}`)); err != nil {
		t.Errorf(".json file bytes: %v", err)
	}
	// chi serves a subrouter's root with a trailing slash too.
	slash := httptest.NewRequest("GET", "/v1/vms/vm_1/", nil)
	h = http.Header{"Content-Type": {"application/problem+json"}, "X-Request-Id": {"abc"}}
	if err := Check(doc, slash, 404, h, []byte(validProblem)); err != nil {
		t.Errorf("trailing slash: %v", err)
	}
	if err := Check(doc, slash, 200, http.Header{"Content-Type": {"application/json"}}, []byte(`{}`)); err == nil {
		t.Errorf("trailing slash: an empty VM passed")
	}
}
