package handlers

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/cluster"
	"github.com/agentos-gateway/agentos-gateway/nodeproxy"
)

// forwardedKey marks, in a request's context, a request another node
// forwarded and signed: it is served here, never forwarded again, and was
// rate-limited by the node the client called.
type forwardedKey struct{}

func isForwarded(ctx context.Context) bool {
	v, _ := ctx.Value(forwardedKey{}).(bool)
	return v
}

// nodeHeader names this node on every response, and checks the signature
// of requests other nodes forward: a request claiming to be forwarded that
// is not signed with the cluster secret is refused.
func (s *Server) nodeHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Cluster == nil {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set(cluster.NodeHeader, s.cfg.Cluster.ID())
		if !cluster.Forwarded(r) {
			next.ServeHTTP(w, r)
			return
		}
		from, err := s.cfg.Cluster.Verify(r)
		if err != nil {
			zerolog.Ctx(r.Context()).Warn().Err(err).Msg("refused a forwarded request")
			writeError(w, r, gateway.Wrap(gateway.CodeUnauthenticated, err, "the request claims to come from another gateway node but is not signed with the cluster secret"))
			return
		}
		log := zerolog.Ctx(r.Context()).With().Str("forwardedBy", from).Logger()
		ctx := context.WithValue(log.WithContext(r.Context()), forwardedKey{}, true)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// proxying reports whether requests may go to other nodes.
func (s *Server) proxying(r *http.Request) bool {
	return s.cfg.Cluster != nil && s.cfg.Cluster.Shared() && !isForwarded(r.Context())
}

// toOwner serves a request for a VM on the node that runs it: here when
// this node does (or nobody does any more: the record answers), through a
// proxy to the owner when it is another live node (remoteOwner).
func (s *Server) toOwner(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := pathParam(r, "vm")
		peer, remote, err := s.remoteOwner(r, principalFrom(r.Context()).tenant.ID, id)
		if err != nil {
			writeError(w, r, err)
			return
		}
		if !remote {
			next.ServeHTTP(w, r)
			return
		}
		s.proxy(w, r, peer, func(w http.ResponseWriter, r *http.Request, since time.Time) {
			// The owner did not answer. Once it is known dead its VMs are
			// lost in the store: a read is answered from there; anything
			// else gets the lost VM's conflict, as the body may be spent.
			if s.cfg.Cluster.AwaitVerdict(r.Context(), peer.ID, since) {
				if r.Method == http.MethodGet || r.Method == http.MethodHead {
					next.ServeHTTP(w, r)
					return
				}
				if err := s.vms.Usable(r.Context(), principalFrom(r.Context()).tenant.ID, id); err != nil {
					writeError(w, r, err)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			if r.Context().Err() != nil {
				return
			}
			w.Header().Set("Retry-After", "1")
			writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "node %s, which runs VM %s, does not answer", peer.ID, id).WithDetail("node", peer.ID))
		})
	})
}

// remoteOwner returns the node that runs a tenant's VM when the request is
// to be proxied there: another live node. remote is false when this node
// serves it: it runs the VM, or nobody does any more (the record answers).
// The VMs of a node that stopped heartbeating are marked lost first, so
// they answer lost rather than a proxy error.
func (s *Server) remoteOwner(r *http.Request, tenantID, vmID string) (peer cluster.Peer, remote bool, err error) {
	if !s.proxying(r) || s.vms.Runs(vmID) {
		return cluster.Peer{}, false, nil
	}
	vm, err := s.vms.Get(r.Context(), tenantID, vmID)
	if err == nil && (vm.State == gateway.VMHibernated || vm.Restorable()) {
		return s.wakerOf(r)
	}
	if err != nil || vm.Node == "" || vm.Node == s.cfg.Cluster.ID() || vm.State.Final() {
		return cluster.Peer{}, false, nil
	}
	peer, err = s.cfg.Cluster.Peer(r.Context(), vm.Node)
	if err != nil {
		return cluster.Peer{}, false, err
	}
	if !peer.Alive {
		return cluster.Peer{}, false, s.cfg.Cluster.ReapNow(r.Context())
	}
	return peer, true, nil
}

// wakerOf returns the node that serves a request for a hibernated VM, or a
// lost one to restore: this one, which wakes it, unless it drains and wakes
// nothing; then the first node that takes new VMs (cluster.Rank).
func (s *Server) wakerOf(r *http.Request) (cluster.Peer, bool, error) {
	if !s.vms.Cordoned() {
		return cluster.Peer{}, false, nil
	}
	candidates, err := s.cfg.Cluster.Candidates(r.Context())
	if err != nil {
		return cluster.Peer{}, false, err
	}
	for _, c := range candidates {
		if c.ID != s.cfg.Cluster.ID() {
			return cluster.Peer{ID: c.ID, AdvertiseAddr: c.AdvertiseAddr, Alive: true}, true, nil
		}
	}
	return cluster.Peer{}, false, nil
}

// placeCreate sends POST /v1/vms to the least-loaded live node that is not
// draining (cluster.Rank): served here when that is this node, proxied
// otherwise; a node that does not answer is skipped for the next one.
func (s *Server) placeCreate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.proxying(r) {
			next.ServeHTTP(w, r)
			return
		}
		candidates, err := s.cfg.Cluster.Candidates(r.Context())
		if err != nil {
			writeError(w, r, err)
			return
		}
		if len(candidates) == 0 {
			writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "no live gateway node takes new VMs (all are draining or dead)"))
			return
		}
		// The body is small (MaxBodyBytes) and may be sent more than once.
		body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
		if err != nil {
			writeError(w, r, gateway.Wrap(gateway.CodeInvalidArgument, err, "the request body could not be read"))
			return
		}
		reset := func() {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		for _, c := range candidates {
			reset()
			if c.ID == s.cfg.Cluster.ID() {
				next.ServeHTTP(w, r)
				return
			}
			answered := true
			s.proxy(w, r, cluster.Peer{ID: c.ID, AdvertiseAddr: c.AdvertiseAddr, Alive: true}, func(http.ResponseWriter, *http.Request, time.Time) {
				answered = false
			})
			if answered || r.Context().Err() != nil {
				return
			}
			zerolog.Ctx(r.Context()).Warn().Str("node", c.ID).Msg("node does not answer; placing the VM on the next one")
		}
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "no live gateway node answered the create"))
	})
}

// proxy forwards r to peer (package nodeproxy) and streams the answer back.
// failed is called, with nothing written yet, when the peer gives no
// answer.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, peer cluster.Peer, failed func(http.ResponseWriter, *http.Request, time.Time)) {
	s.nodes.Forward(w, r, nodeproxy.Node{ID: peer.ID, Addr: peer.AdvertiseAddr}, failed)
}
