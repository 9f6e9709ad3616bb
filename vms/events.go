package vms

import gateway "github.com/agentos-gateway/agentos-gateway"

// Publish appends ev to the event stream of a VM this service runs, for the
// services beside it (a schedule's runs); it does nothing for any other VM.
func (s *Service) Publish(vmID string, ev gateway.VMEvent) {
	s.mu.Lock()
	lv := s.live[vmID]
	s.mu.Unlock()
	if lv != nil {
		lv.events.Append(0, 256, ev)
	}
}
