package api

// ForkRequest is the body of POST /v1/vms/{vm}/fork.
type ForkRequest struct {
	// Count is how many VMs to create from a fresh snapshot of the VM.
	Count int `json:"count" validate:"required,gte=1,lte=16"`
}

// Forked is the answer of POST /v1/vms/{vm}/fork: the new VMs, whose files
// are the VM's and whose processes are none of its.
type Forked struct {
	VMs []VM `json:"vms"`
}
