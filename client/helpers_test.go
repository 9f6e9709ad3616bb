package client_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// newClient is client.New for a base URL that must be valid.
func newClient(t testing.TB, baseURL string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(baseURL, apiKey, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// noRetry is a client option for tests of error answers, which must see
// the first answer.
var noRetry = client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1})

func fastRetry(max int) client.Option {
	return client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: max, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
}

// recorded is what the recording handler saw of one request.
type recorded struct {
	Method      string
	EscapedPath string
	Query       url.Values
	Header      http.Header
	Body        []byte
	ContentLen  int64
	At          time.Time
}

// canned is the answer the recording handler gives.
type canned struct {
	status int
	ctype  string
	header map[string]string
	body   string
}

// recorder records every request and answers each with the next of its
// canned answers (the last one over and over).
type recorder struct {
	mu    sync.Mutex
	got   []recorded
	resps []canned
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.got = append(rc.got, recorded{Method: r.Method, EscapedPath: r.URL.EscapedPath(), Query: r.URL.Query(),
		Header: r.Header.Clone(), Body: body, ContentLen: r.ContentLength, At: time.Now()})
	resp := canned{}
	if n := len(rc.resps); n > 0 {
		resp = rc.resps[min(len(rc.got), n)-1]
	}
	rc.mu.Unlock()
	for k, v := range resp.header {
		w.Header().Set(k, v)
	}
	if resp.ctype != "" {
		w.Header().Set("Content-Type", resp.ctype)
	}
	if resp.status == 0 {
		resp.status = http.StatusOK
	}
	w.WriteHeader(resp.status)
	_, _ = io.WriteString(w, resp.body)
}

// reset forgets the requests seen and sets the answers to give.
func (rc *recorder) reset(answers ...canned) {
	rc.mu.Lock()
	rc.got, rc.resps = nil, answers
	rc.mu.Unlock()
}

func (rc *recorder) requests() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]recorded(nil), rc.got...)
}

// expect returns an error saying what is wrong when cond is false; the
// calls of the tables use it on their answers.
func expect(cond bool, what string, args ...any) error {
	if cond {
		return nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("unexpected %s %+v", what, args)
	}
	return fmt.Errorf("unexpected %s %s", what, b)
}

func problem(status int, code, detail string) canned {
	return canned{status: status, ctype: "application/problem+json",
		body: fmt.Sprintf(`{"status":%d,"code":%q,"detail":%q}`, status, code, detail)}
}

// options decodes a permission request's options, or nil when they are not
// valid.
func options(raw json.RawMessage) []client.PermissionOption {
	opts, err := client.PermissionOptions(raw)
	if err != nil {
		return nil
	}
	return opts
}

// option returns the id of the first option of kind, or "".
func option(raw json.RawMessage, kind string) string {
	for _, o := range options(raw) {
		if o.Kind == kind {
			return o.OptionID
		}
	}
	return ""
}
