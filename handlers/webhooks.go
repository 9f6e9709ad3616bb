package handlers

import (
	"net/http"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/notify"
)

// webhooks returns the subscriptions' service, or answers 503 when the
// gateway has none.
func (s *Server) webhooks(w http.ResponseWriter, r *http.Request) (*notify.Service, bool) {
	if s.cfg.Webhooks == nil {
		writeError(w, r, gateway.Errorf(gateway.CodeUnavailable, "this gateway delivers no webhooks"))
		return nil, false
	}
	return s.cfg.Webhooks, true
}

// checkWebhookVM refuses a subscription's vm that is not one of the
// caller's tenant's VMs (empty: every VM); another tenant's VM is as
// unknown as one that never was.
func (s *Server) checkWebhookVM(r *http.Request, vmID string) error {
	if vmID == "" {
		return nil
	}
	if _, err := s.vms.Get(r.Context(), principalFrom(r.Context()).tenant.ID, vmID); err != nil {
		return gateway.Errorf(gateway.CodeInvalidArgument, "vm %s is not one of the tenant's VMs", vmID).WithDetail("field", "vm")
	}
	return nil
}

func eventTypes(names []string) []gateway.EventType {
	if names == nil {
		return nil
	}
	out := make([]gateway.EventType, len(names))
	for i, n := range names {
		out[i] = gateway.EventType(n)
	}
	return out
}

func webhookResource(h gateway.Webhook) api.Webhook {
	events := make([]string, len(h.Events))
	for i, e := range h.Events {
		events[i] = string(e)
	}
	out := api.Webhook{ID: h.ID, URL: h.URL, Events: events, VM: h.VMID, Description: h.Description, State: string(h.State),
		DisabledReason: h.DisabledReason, CreatedAt: h.CreatedAt.UTC(), UpdatedAt: h.UpdatedAt.UTC()}
	if !h.FailingSince.IsZero() {
		t := h.FailingSince.UTC()
		out.FailingSince = &t
	}
	return out
}

func deliveryResource(d gateway.Delivery) api.Delivery {
	out := api.Delivery{ID: d.ID, SubscriptionID: d.SubscriptionID, Type: string(d.Type), Sequence: d.Sequence, VM: d.VMID,
		Status: string(d.Status), Attempts: d.Attempts, LastStatus: d.LastStatus, LastError: d.LastError,
		CreatedAt: d.CreatedAt.UTC(), Data: d.Data}
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	if d.Status == gateway.DeliveryPending {
		out.NextAttemptAt = opt(d.NextAttemptAt)
	}
	out.DoneAt = opt(d.DoneAt)
	return out
}

// createWebhook subscribes the caller's tenant to events: 201 with the
// subscription.
func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.webhooks(w, r)
	if !ok {
		return
	}
	var req api.CreateWebhookRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	if err := s.checkWebhookVM(r, req.VM); err != nil {
		writeError(w, r, err)
		return
	}
	h, err := svc.Subscribe(r.Context(), gateway.Webhook{TenantID: p.tenant.ID, URL: req.URL, Events: eventTypes(req.Events),
		VMID: req.VM, Description: req.Description})
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/webhooks/"+h.ID)
	writeJSON(w, http.StatusCreated, webhookResource(h))
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.webhooks(w, r)
	if !ok {
		return
	}
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	page, err := svc.List(r.Context(), principalFrom(r.Context()).tenant.ID, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.List[api.Webhook]{Items: make([]api.Webhook, len(page.Items)), NextCursor: page.NextCursor}
	for i, h := range page.Items {
		out.Items[i] = webhookResource(h)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.webhooks(w, r)
	if !ok {
		return
	}
	h, err := svc.Get(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "webhook"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, webhookResource(h))
}

func (s *Server) updateWebhook(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.webhooks(w, r)
	if !ok {
		return
	}
	var req api.UpdateWebhookRequest
	if err := decodeJSON(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
		writeError(w, r, err)
		return
	}
	p := principalFrom(r.Context())
	if req.VM != nil {
		if err := s.checkWebhookVM(r, *req.VM); err != nil {
			writeError(w, r, err)
			return
		}
	}
	h, err := svc.Update(r.Context(), p.tenant.ID, pathParam(r, "webhook"), notify.Change{URL: req.URL, Events: eventTypes(req.Events),
		VMID: req.VM, Description: req.Description, Enabled: req.Enabled})
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, webhookResource(h))
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.webhooks(w, r)
	if !ok {
		return
	}
	if err := svc.Delete(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "webhook")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listDeliveries pages a subscription's deliveries, in sequence: each
// with its attempts, last status and error, and next attempt.
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.webhooks(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit, err := queryInt(r, "limit", 50, 1, 500)
	if err != nil {
		writeError(w, r, err)
		return
	}
	f := gateway.DeliveryFilter{Status: gateway.DeliveryStatus(q.Get("status")), Cursor: q.Get("cursor"), Limit: limit}
	switch f.Status {
	case "", gateway.DeliveryPending, gateway.DeliveryDelivered, gateway.DeliveryFailed:
	default:
		writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "status must be pending, delivered or failed").WithDetail("field", "status"))
		return
	}
	if f.After, err = queryTime(r, "after"); err != nil {
		writeError(w, r, err)
		return
	}
	page, err := svc.Deliveries(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "webhook"), f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.List[api.Delivery]{Items: make([]api.Delivery, len(page.Items)), NextCursor: page.NextCursor}
	for i, d := range page.Items {
		out.Items[i] = deliveryResource(d)
	}
	writeJSON(w, http.StatusOK, out)
}

// redeliver sends a delivery again, now, under its id: 202 with it.
func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) {
	svc, ok := s.webhooks(w, r)
	if !ok {
		return
	}
	d, err := svc.Redeliver(r.Context(), principalFrom(r.Context()).tenant.ID, pathParam(r, "webhook"), pathParam(r, "delivery"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, deliveryResource(d))
}
