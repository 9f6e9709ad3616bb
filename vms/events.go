package vms

import (
	"context"
	"strconv"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// EventSink is told of the events webhooks deliver (notify.Service): it
// writes them to the store's outbox. The VMs' changes of state are not
// among them: the store writes those with the change.
type EventSink interface {
	Publish(ctx context.Context, evs ...gateway.Event) error
}

// Publish appends ev to the event stream of a VM this service runs, for the
// services beside it (a schedule's runs), and tells the event sink of a
// schedule's run; it does nothing for any other VM.
func (s *Service) Publish(vmID string, ev gateway.VMEvent) {
	s.mu.Lock()
	lv := s.live[vmID]
	s.mu.Unlock()
	if lv == nil {
		return
	}
	lv.events.Append(0, 256, ev)
	if ev.Type == gateway.VMEventScheduleRun {
		data := gateway.ScheduleRunData{VMID: vmID, ScheduleID: ev.Name, RunID: ev.Detail["run"], Outcome: ev.Detail["outcome"]}
		if code, err := strconv.Atoi(ev.Detail["exitCode"]); err == nil {
			data.ExitCode = &code
		}
		s.tell(gateway.NewEvent(gateway.EventScheduleRun, lv.tenantID, vmID, ev.Time, data))
	}
}

// stateEvent appends a change of lv's state to its stream. (The store
// writes the vm.state event of the change with its record.)
func (s *Service) stateEvent(lv *liveVM, state gateway.VMState, reason string) {
	lv.events.Append(0, 64, gateway.VMEvent{Type: gateway.VMEventState, Time: s.cfg.Now().UTC(), State: state, Reason: reason})
}

// tell writes ev to the event sink, if there is one, within its own
// timeout: the change it tells of happened, whatever the caller's context
// says. A failure is logged; the change stands.
func (s *Service) tell(ev gateway.Event) {
	if s.cfg.Events == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeWriteTimeout)
	defer cancel()
	if err := s.cfg.Events.Publish(ctx, ev); err != nil {
		s.log.Error().Err(err).Str("vm", ev.VMID).Str("event", string(ev.Type)).Msg("write an event to the webhooks' outbox")
	}
}
