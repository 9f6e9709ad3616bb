package client

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// PortURL is the URL of a guest port of the VM through the gateway, ending
// in "/": a path appended to it reaches the server on that port. Calls to
// it need the API key, as Fetch sends it. It makes no call.
func (v *VMHandle) PortURL(port int) string {
	return v.c.base + v.portPath(port) + "/"
}

func (v *VMHandle) portPath(port int) string { return vmPath(v.id, "ports", strconv.Itoa(port)) }

// Fetch sends req to the HTTP server listening on port inside the VM,
// through the gateway: its method, header, body and its URL's path and
// query (the scheme and host are ignored), with the client's API key,
// which the gateway does not pass on to the guest. It returns the guest's
// response whatever its status, its body streaming; close it. A status of
// the gateway's own (no server on the port: 503; a body over 2 MiB: 413)
// comes as an application/problem+json response.
// It is never retried.
func (v *VMHandle) Fetch(ctx context.Context, port int, req *http.Request) (*http.Response, error) {
	path := req.URL.EscapedPath()
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	r := request{method: req.Method, path: v.portPath(port) + path, body: req.Body, size: req.ContentLength, headers: req.Header.Clone()}
	out, err := v.c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	out.URL.RawQuery = req.URL.RawQuery
	resp, err := v.c.hc.Do(out)
	if err != nil {
		return nil, fmt.Errorf("client: %s port %d%s: %w", req.Method, port, path, err)
	}
	return resp, nil
}
