package vms

import (
	"context"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// VMSetup prepares each new VM before its record says ready (its host
// bindings, for one), and learns of the end of every VM this service runs.
type VMSetup interface {
	// SetUpVM runs once the engine created the VM; an error fails the
	// create and the VM is disposed.
	SetUpVM(ctx context.Context, vm gateway.VM, host BindingHost) error
	// VMEnded is called once the VM's final state is recorded; it must not
	// block.
	VMEnded(vmID string)
}

// SetUpVMsWith sets what prepares new VMs (nil for nothing); set it before
// the service serves requests.
func (s *Service) SetUpVMsWith(v VMSetup) {
	s.mu.Lock()
	s.setup = v
	s.mu.Unlock()
}

func (s *Service) vmSetup() VMSetup {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setup
}

// setupTimeout bounds a VM's setup within its create.
const setupTimeout = 30 * time.Second

// Setups is several VMSetups as one, each run in order: the first error
// fails the VM's create or wake, and every one learns of the VM's end.
type Setups []VMSetup

// SetUpVM runs every setup on the VM.
func (ss Setups) SetUpVM(ctx context.Context, vm gateway.VM, host BindingHost) error {
	for _, s := range ss {
		if err := s.SetUpVM(ctx, vm, host); err != nil {
			return err
		}
	}
	return nil
}

// VMEnded tells every setup that the VM ended.
func (ss Setups) VMEnded(vmID string) {
	for _, s := range ss {
		s.VMEnded(vmID)
	}
}
