package client_test

import (
	"context"
	"iter"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// TestListIterators checks that the list iterators follow nextCursor
// across pages with the same filters, stop fetching when the loop breaks,
// and end with the error of a page that fails.
func TestListIterators(t *testing.T) {
	page := func(cursor string, items ...string) canned {
		return canned{ctype: jsonCT, body: `{"items":[` + strings.Join(items, ",") + `],"nextCursor":"` + cursor + `"}`}
	}
	vm := func(id string) string { return strings.Replace(vmJSON, `"vm_1"`, `"`+id+`"`, 1) }
	tenant := func(id string) string { return strings.Replace(tenantJSON, `"t/1"`, `"`+id+`"`, 1) }
	session := func(id string) string { return strings.Replace(idleSessionJSON, `"ses 1/x?#"`, `"`+id+`"`, 1) }

	// A lister iterates over the ids of one list's items.
	type lister func(ctx context.Context, c *client.Client) iter.Seq2[string, error]
	for _, tc := range []struct {
		name  string
		path  string
		query url.Values // besides cursor
		list  lister
		item  func(string) string
	}{
		{"VMs", "/v1/vms", url.Values{"state": {"all"}, "label": {"team=a b"}, "limit": {"2"}}, func(ctx context.Context, c *client.Client) iter.Seq2[string, error] {
			return ids(c.VMs(ctx, client.ListVMsOptions{AllStates: true, Labels: map[string]string{"team": "a b"}, Limit: 2, Cursor: "ignored"}), func(v client.VM) string { return v.ID })
		}, vm},
		{"Tenants", "/v1/tenants", url.Values{}, func(ctx context.Context, c *client.Client) iter.Seq2[string, error] {
			return ids(c.Tenants(ctx), func(t client.Tenant) string { return t.ID })
		}, tenant},
		{"VM.Sessions", "/v1/vms/" + weirdVMEsc + "/sessions", url.Values{}, func(ctx context.Context, c *client.Client) iter.Seq2[string, error] {
			return ids(c.VM(weirdVM).Sessions(ctx), func(s client.Session) string { return s.ID })
		}, session},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			c := newClient(t, srv.URL, noRetry)
			pages := []canned{page("c/2 &", tc.item("a"), tc.item("b")), page("c3", tc.item("c")), page("", tc.item("d"))}
			wantQuery := func(cursor string) url.Values {
				q := url.Values{}
				for k, v := range tc.query {
					q[k] = v
				}
				if cursor != "" {
					q.Set("cursor", cursor)
				}
				return q
			}

			t.Run("all pages", func(t *testing.T) {
				rec.reset(pages...)
				var got []string
				for id, err := range tc.list(context.Background(), c) {
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, id)
				}
				if strings.Join(got, ",") != "a,b,c,d" {
					t.Fatalf("items %v", got)
				}
				reqs := rec.requests()
				if len(reqs) != 3 {
					t.Fatalf("%d requests", len(reqs))
				}
				for i, cursor := range []string{"", "c/2 &", "c3"} {
					if reqs[i].EscapedPath != tc.path || !reflect.DeepEqual(reqs[i].Query, wantQuery(cursor)) {
						t.Errorf("request %d: %s %v, want cursor %q", i, reqs[i].EscapedPath, reqs[i].Query, cursor)
					}
				}
			})
			for _, stop := range []struct {
				name     string
				after    int
				requests int
			}{{"break inside the first page", 1, 1}, {"break at the end of the first page", 2, 1}, {"break on the second page", 3, 2}} {
				t.Run(stop.name, func(t *testing.T) {
					rec.reset(pages...)
					n := 0
					for _, err := range tc.list(context.Background(), c) {
						if err != nil {
							t.Fatal(err)
						}
						n++
						if n == stop.after {
							break
						}
					}
					if got := len(rec.requests()); n != stop.after || got != stop.requests {
						t.Fatalf("%d items, %d requests; want %d requests", n, got, stop.requests)
					}
				})
			}
			t.Run("a page fails", func(t *testing.T) {
				rec.reset(pages[0], problem(400, "invalid_argument", "the cursor expired"))
				var got []string
				var last error
				for id, err := range tc.list(context.Background(), c) {
					if last != nil {
						t.Fatalf("a value after the error %v", last)
					}
					if err != nil {
						last = err
						continue
					}
					got = append(got, id)
				}
				if strings.Join(got, ",") != "a,b" || !client.IsCode(last, client.CodeInvalidArgument) || len(rec.requests()) != 2 {
					t.Fatalf("items %v, err %v, %d requests", got, last, len(rec.requests()))
				}
			})
		})
	}
}

// ids maps an iterator of list items to their ids.
func ids[T any](seq iter.Seq2[T, error], id func(T) string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for it, err := range seq {
			if err != nil {
				yield("", err)
				return
			}
			if !yield(id(it), nil) {
				return
			}
		}
	}
}
