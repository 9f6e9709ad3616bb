package agentos

import "maps"

// SetEnv gives the VM, after its creation, environment variables that every
// process started on it from then on gets, under the process's own: what
// the same variables in VMOptions.Env give. The sidecar fixes a VM's
// environment when it creates the VM, but merges each process's environment
// over it, so variables can be added this way to a VM created earlier, such
// as a warm VM handed to a tenant. A later call replaces the earlier one.
func (vm *VM) SetEnv(env map[string]string) {
	c := maps.Clone(env)
	vm.env.Store(&c)
}

// processEnv is the environment sent with a process launch: the VM's
// SetEnv variables with the process's own over them.
func (vm *VM) processEnv(own map[string]string) map[string]string {
	base := vm.env.Load()
	if base == nil || len(*base) == 0 {
		return own
	}
	out := maps.Clone(*base)
	maps.Copy(out, own)
	return out
}
