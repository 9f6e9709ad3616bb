// Package previews serves preview URLs: unguessable tokens that open a port
// of a VM to anyone holding them (a browser iframe, without the API key),
// until they expire, are revoked or their VM ends. Previews are kept in the
// store, so that a token resolves on any node of a cluster.
package previews

import (
	"context"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Store keeps previews.
type Store interface {
	CreatePreview(ctx context.Context, tenantID, vmID string, port int, ttl time.Duration, maxPerVM int) (gateway.Preview, string, error)
	PreviewByToken(ctx context.Context, token string) (gateway.Preview, error)
	ListPreviews(ctx context.Context, tenantID, vmID string, now time.Time) ([]gateway.Preview, error)
	DeletePreview(ctx context.Context, tenantID, vmID, id string) error
	DeleteVMPreviews(ctx context.Context, vmID string) (int, error)
}

// VMs tells what state a VM is in.
type VMs interface {
	// Usable reports whether a tenant's VM can take calls now.
	Usable(ctx context.Context, tenantID, id string) error
	// Get returns a tenant's VM record.
	Get(ctx context.Context, tenantID, id string) (gateway.VM, error)
}

// Config configures the service; zero fields take the gateway's defaults.
type Config struct {
	// MaxPerVM bounds the live previews of one VM (gateway.MaxPreviewsPerVM).
	MaxPerVM int
	// MaxTTL bounds a preview's life (gateway.MaxPreviewTTL).
	MaxTTL time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Service creates, resolves and revokes previews.
type Service struct {
	store Store
	vms   VMs
	cfg   Config
}

// New returns the previews service. Its arguments come in the order every
// service's constructor takes them: the configuration, then the store, then
// the services it uses.
func New(cfg Config, st Store, vms VMs) *Service {
	if cfg.MaxPerVM <= 0 {
		cfg.MaxPerVM = gateway.MaxPreviewsPerVM
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = gateway.MaxPreviewTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: st, vms: vms, cfg: cfg}
}

// MaxPerVM is the bound of live previews of one VM.
func (s *Service) MaxPerVM() int { return s.cfg.MaxPerVM }

// Create makes a preview of port of a tenant's live VM that lives for ttl
// (gateway.DefaultPreviewTTL when zero), and returns it with its token,
// shown only now. A port outside 1-65535 or a ttl outside one second to
// MaxTTL is CodeInvalidArgument naming the field.
func (s *Service) Create(ctx context.Context, tenantID, vmID string, port int, ttl time.Duration) (gateway.Preview, string, error) {
	if port < 1 || port > 65535 {
		return gateway.Preview{}, "", gateway.Errorf(gateway.CodeInvalidArgument, "port must be between 1 and 65535, not %d", port).WithDetail("field", "port")
	}
	if ttl == 0 {
		ttl = gateway.DefaultPreviewTTL
	}
	if ttl < time.Second || ttl > s.cfg.MaxTTL {
		return gateway.Preview{}, "", gateway.Errorf(gateway.CodeInvalidArgument, "ttlSeconds must be between 1 and %d", int64(s.cfg.MaxTTL/time.Second)).
			WithDetail("field", "ttlSeconds")
	}
	if err := s.vms.Usable(ctx, tenantID, vmID); err != nil {
		return gateway.Preview{}, "", err
	}
	return s.store.CreatePreview(ctx, tenantID, vmID, port, ttl, s.cfg.MaxPerVM)
}

// List returns the live previews of a tenant's VM, oldest first.
func (s *Service) List(ctx context.Context, tenantID, vmID string) ([]gateway.Preview, error) {
	if _, err := s.vms.Get(ctx, tenantID, vmID); err != nil {
		return nil, err
	}
	return s.store.ListPreviews(ctx, tenantID, vmID, s.cfg.Now())
}

// Get returns one live preview of a tenant's VM; an expired one is
// CodeNotFound.
func (s *Service) Get(ctx context.Context, tenantID, vmID, id string) (gateway.Preview, error) {
	list, err := s.List(ctx, tenantID, vmID)
	if err != nil {
		return gateway.Preview{}, err
	}
	for _, p := range list {
		if p.ID == id {
			return p, nil
		}
	}
	return gateway.Preview{}, gateway.Errorf(gateway.CodeNotFound, "preview %s not found", id)
}

// Revoke ends a tenant's preview at once.
func (s *Service) Revoke(ctx context.Context, tenantID, vmID, id string) error {
	if _, err := s.vms.Get(ctx, tenantID, vmID); err != nil {
		return err
	}
	return s.store.DeletePreview(ctx, tenantID, vmID, id)
}

// Resolve returns the preview a token opens. A token that is unknown,
// revoked or expired, or whose VM ended, is CodeNotFound, all alike so as
// to tell a guesser nothing; the previews of an ended VM are removed.
func (s *Service) Resolve(ctx context.Context, token string) (gateway.Preview, error) {
	gone := gateway.Errorf(gateway.CodeNotFound, "this preview does not exist, has expired or was revoked")
	p, err := s.store.PreviewByToken(ctx, token)
	if gateway.ErrorCode(err) == gateway.CodeNotFound {
		return gateway.Preview{}, gone
	}
	if err != nil {
		return gateway.Preview{}, err
	}
	if p.Expired(s.cfg.Now()) {
		return gateway.Preview{}, gone
	}
	vm, err := s.vms.Get(ctx, p.TenantID, p.VMID)
	if gateway.ErrorCode(err) == gateway.CodeNotFound {
		return gateway.Preview{}, gone
	}
	if err != nil {
		return gateway.Preview{}, err
	}
	if vm.State.Final() {
		// A preview never outlives its VM; its rows go now rather than
		// with the VM's record, which is kept for a while.
		if _, err := s.store.DeleteVMPreviews(ctx, p.VMID); err != nil {
			return gateway.Preview{}, err
		}
		return gateway.Preview{}, gone
	}
	return p, nil
}
