package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) portForwardCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "port-forward VM PORT [LOCAL]",
		Short: "Serve a VM's HTTP port on a local port (HTTP only)",
		Long: `port-forward listens on 127.0.0.1:LOCAL (default: PORT; 0 picks a free port)
and passes every HTTP request it gets to the server listening on PORT inside
the VM, through the gateway's port route (/v1/vms/VM/ports/PORT/...), with the
API key, which never reaches the guest. It prints the local address, then
serves until Ctrl-C.

Only HTTP is forwarded: the gateway reaches guest ports through the engine's
fetch, which carries HTTP requests and streamed responses but no raw TCP and
no WebSocket upgrades. A request body is limited to 2 MiB; a port nothing
listens on answers 503.`,
		Args: func(cmd *cobra.Command, argv []string) error {
			if len(argv) < 2 || len(argv) > 3 {
				return usageError{msg: "port-forward takes a VM id, a guest port and optionally a local port"}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			port, err := parsePort(argv[1], false)
			if err != nil {
				return err
			}
			local := port
			if len(argv) == 3 {
				if local, err = parsePort(argv[2], true); err != nil {
					return err
				}
			}
			return a.portForward(cmd.Context(), argv[0], port, local)
		},
	}
}

func parsePort(s string, zero bool) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !zero) {
		return 0, usageError{msg: fmt.Sprintf("%q is not a port number", s)}
	}
	return n, nil
}

func (a *app) portForward(ctx context.Context, vmID string, port, local int) error {
	c, key, err := a.client()
	if err != nil {
		return err
	}
	// Check the key and the VM first, so that a mistake is told here
	// rather than as the answer of the first request.
	if _, err := c.VM(vmID).Get(ctx); err != nil {
		return fmt.Errorf("forward port %d of VM %s: %w", port, vmID, err)
	}
	target, err := url.Parse(c.VM(vmID).PortURL(port))
	if err != nil {
		return fmt.Errorf("forward port %d of VM %s: %w", port, vmID, err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Header.Set("Authorization", "Bearer "+key)
		},
		// Flush every chunk at once: event streams and long polls work.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			fmt.Fprintf(a.stderr, "agentos: %s %s: %s\n", r.Method, r.URL.Path, describe(err, a.url))
			http.Error(w, "agentos port-forward: "+describe(err, a.url), http.StatusBadGateway)
		},
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		return fmt.Errorf("forward port %d of VM %s: %w", port, vmID, err)
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 30 * time.Second}
	fmt.Fprintf(a.stdout, "Forwarding http://%s -> port %d of VM %s (HTTP only)\n", ln.Addr(), port, vmID)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("forward port %d of VM %s: %w", port, vmID, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stop forwarding: %w", err)
	}
	return nil
}
