package agentmcp

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentos-gateway/agentos-gateway/client"
	"github.com/agentos-gateway/agentos-gateway/internal/inproc"
)

// HandlerOptions configures NewHandler.
type HandlerOptions struct {
	// Version is announced in the server's implementation info.
	Version string
	// MaxRequestBytes bounds a request's body (0: the SDK's default, 4 MiB),
	// which carries write_file's content.
	MaxRequestBytes int64
	// Logger logs what the SDK has to say of the transport (nil: nothing).
	Logger *slog.Logger
}

// forwardedHeaders are the headers of an MCP request that its tool calls
// carry to the router, so that they are judged as the request would be:
// the origin a token may be bound to, and what a proxy in front said of
// the client and of the URL it used (which preview URLs are made of).
var forwardedHeaders = []string{"Origin", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Prefix"}

// NewHandler serves the tools over Streamable HTTP, calling gateway (the
// gateway's own router) in process with the credential of each request.
//
// It is stateless, as the current revision of the protocol is: every POST
// stands alone, with a server and a client of its own, so that no session
// outlives its request, any node of a cluster can answer any request, and
// a credential is never remembered between requests. GET and DELETE, for
// the sessions and the server-initiated stream of stateful servers, are
// not served (405 says so, as the transport's spec asks).
//
// The caller must have authenticated the request: NewHandler reads the
// bearer secret and leaves every decision on it to the router.
func NewHandler(gateway http.Handler, opts HandlerOptions) http.Handler {
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		c, err := clientFor(gateway, r)
		if err != nil {
			// The request's own Host cannot make a URL: nothing can be
			// called for it (the SDK answers 400).
			return nil
		}
		// A server per request costs about 0.6 ms and 0.5 MB with the
		// shared schema cache (measured on the 2-core machine): little
		// beside a call to a VM, and what keeps each request's credential
		// its own.
		return NewServer(c, opts.Version)
	}, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		MaxRequestBodyBytes: opts.MaxRequestBytes,
		Logger:              opts.Logger,
		// The protection is against a web page that reaches a server on
		// localhost by rebinding a name it controls; every request here
		// must carry a bearer credential, which such a page does not have,
		// and a gateway behind a proxy on the same host sees its public
		// name as the Host of local connections.
		DisableLocalhostProtection: true,
	})
}

// clientFor is a client that calls gateway in process as r's caller: with
// r's credential, at r's own URL (the base of the preview URLs the gateway
// makes), from r's peer and with the headers forwardedHeaders names.
func clientFor(gateway http.Handler, r *http.Request) (*client.Client, error) {
	_, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	hdr := http.Header{}
	for _, k := range forwardedHeaders {
		if v := r.Header.Values(k); len(v) > 0 {
			hdr[k] = v
		}
	}
	tr := &inproc.Transport{Handler: gateway, RemoteAddr: r.RemoteAddr, TLS: r.TLS, Header: hdr}
	return client.New(scheme+"://"+r.Host, strings.TrimSpace(secret),
		client.WithHTTPClient(&http.Client{Transport: tr}), client.WithUserAgent("agentos-gateway-mcp/1"))
}
