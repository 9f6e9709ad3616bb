package vms

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/agentos"
	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
	"github.com/agentos-gateway/agentos-gateway/vmspec"
)

// MountSpec is a mount a tenant asks for.
type MountSpec struct {
	// Path is where the mount appears in the VM.
	Path   string
	Driver vmspec.MountDriver
	// HostPath is the host directory of a host_dir mount.
	HostPath string
	// ReadOnly, when nil, is read-only for a host directory the admin
	// allowed read-only and read-write otherwise.
	ReadOnly *bool
}

// Mount is a mount of a VM.
type Mount struct {
	Path   string
	Driver vmspec.MountDriver
	// HostPath is the host directory a host_dir mount shows, symbolic
	// links resolved.
	HostPath string
	ReadOnly bool
}

// hostDirConfig is the engine's configuration of a host_dir mount.
type hostDirConfig struct {
	HostPath string `json:"hostPath"`
	ReadOnly bool   `json:"readOnly"`
}

// fieldError is a refusal naming the field of the request at fault.
func fieldError(code gateway.Code, field, format string, args ...any) error {
	return gateway.Errorf(code, format, args...).WithDetail("field", field)
}

// Mounts lists the mounts added to a tenant's VM, oldest first. What the
// engine mounts itself (the root and the software) is not listed.
func (s *Service) Mounts(ctx context.Context, tenantID, vmID string) ([]Mount, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	// The engine's listing says what is mounted and how; the gateway's
	// descriptors say which of those are the tenant's and from where.
	mounted, err := lv.vm.Mounts(ctx)
	if err != nil {
		return nil, EngineError(err, "list mounts")
	}
	out := []Mount{}
	for _, d := range lv.vm.MountDescriptors() {
		i := slices.IndexFunc(mounted, func(m protocol.MountInfo) bool { return m.Path == d.GuestPath })
		if i < 0 {
			continue
		}
		out = append(out, mountOf(d, mounted[i].ReadOnly))
	}
	return out, nil
}

func mountOf(d protocol.MountDescriptor, readOnly bool) Mount {
	m := Mount{Path: d.GuestPath, Driver: vmspec.MountDriver(d.Plugin.ID), ReadOnly: readOnly}
	if m.Driver == vmspec.DriverHostDir {
		var c hostDirConfig
		if json.Unmarshal([]byte(d.Plugin.Config), &c) == nil {
			m.HostPath = c.HostPath
		}
	}
	return m
}

// Mount adds a mount to a tenant's VM. A host directory must lie within a
// directory of --mount-allow once its symbolic links are resolved, and is
// read-write only where that rule allows it. The mount is kept with the VM's
// spec: a woken or restored VM gets it again.
func (s *Service) Mount(ctx context.Context, tenantID, vmID string, spec MountSpec) (Mount, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return Mount{}, err
	}
	d, err := s.mountDescriptor(spec)
	if err != nil {
		return Mount{}, err
	}
	if err := mountOn(ctx, lv.vm, d, spec.Path); err != nil {
		return Mount{}, err
	}
	kept := gateway.VMMount{Path: spec.Path, Driver: string(spec.Driver), HostPath: spec.HostPath, ReadOnly: spec.ReadOnly}
	if _, err := s.store.UpdateVMSpec(ctx, tenantID, vmID, func(vs *gateway.VMSpec) error {
		vs.Mounts = append(slices.DeleteFunc(vs.Mounts, func(m gateway.VMMount) bool { return m.Path == spec.Path }), kept)
		return nil
	}); err != nil {
		// A mount the record does not know would not come back after a
		// wake: it is taken back.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeWriteTimeout)
		_ = lv.vm.Unmount(uctx, spec.Path)
		cancel()
		return Mount{}, err
	}
	return mountOf(d, d.ReadOnly), nil
}

// mountDescriptor checks a mount a tenant asks for against the gateway's
// drivers and --mount-allow, and returns the engine's descriptor of it.
func (s *Service) mountDescriptor(spec MountSpec) (protocol.MountDescriptor, error) {
	if err := vmspec.CheckGuestMountPath(spec.Path); err != nil {
		return protocol.MountDescriptor{}, err
	}
	d := protocol.MountDescriptor{GuestPath: spec.Path}
	switch spec.Driver {
	case vmspec.DriverHostDir:
		host, rule, err := vmspec.AllowHostDir(s.cfg.MountAllow, spec.HostPath)
		if err != nil {
			return d, err
		}
		d.ReadOnly = !rule.ReadWrite
		if spec.ReadOnly != nil {
			if !*spec.ReadOnly && !rule.ReadWrite {
				return d, fieldError(gateway.CodePermissionDenied, "readOnly", "hostPath may only be mounted read-only on this gateway")
			}
			d.ReadOnly = *spec.ReadOnly
		}
		// A struct of a string and a bool always marshals.
		cfg, _ := json.Marshal(hostDirConfig{HostPath: host, ReadOnly: d.ReadOnly})
		d.Plugin = protocol.MountPluginDescriptor{ID: string(vmspec.DriverHostDir), Config: string(cfg)}
	case vmspec.DriverMemory:
		if spec.HostPath != "" {
			return d, fieldError(gateway.CodeInvalidArgument, "hostPath", "only host_dir mounts take a hostPath")
		}
		d.ReadOnly = spec.ReadOnly != nil && *spec.ReadOnly
		d.Plugin = protocol.MountPluginDescriptor{ID: string(vmspec.DriverMemory), Config: "{}"}
	case "":
		return d, fieldError(gateway.CodeInvalidArgument, "driver", "driver is required: one of %s", vmspec.DriverList())
	default:
		return d, fieldError(gateway.CodeInvalidArgument, "driver", "unknown driver %q: the drivers are %s", spec.Driver, vmspec.DriverList())
	}
	return d, nil
}

// mountOn mounts d into vm, with the refusals a tenant understands.
func mountOn(ctx context.Context, vm *agentos.VM, d protocol.MountDescriptor, path string) error {
	if err := vm.Mount(ctx, d); err != nil {
		switch {
		case errors.Is(err, agentos.ErrMounted):
			return gateway.Wrap(gateway.CodeConflict, err, "%s is mounted already; unmount it first", path).WithDetail("field", "path")
		case errors.Is(err, agentos.ErrTooManyMounts):
			return gateway.Wrap(gateway.CodeResourceExhausted, err, "a VM has at most %d mounts", vmspec.MaxMountsPerVM).WithDetail("quota", "mountsPerVm")
		}
		return EngineError(err, "mount")
	}
	return nil
}

// remount mounts again, into a woken or restored VM, the mounts its record
// keeps. One the gateway no longer allows (--mount-allow changed) is left
// out and logged; the VM wakes without it.
func (s *Service) remount(ctx context.Context, vm *agentos.VM, rec gateway.VM) {
	for _, m := range rec.Spec.Mounts {
		spec := MountSpec{Path: m.Path, Driver: vmspec.MountDriver(m.Driver), HostPath: m.HostPath, ReadOnly: m.ReadOnly}
		d, err := s.mountDescriptor(spec)
		if err == nil {
			err = mountOn(ctx, vm, d, m.Path)
		}
		if err != nil {
			s.log.Warn().Err(err).Str("vm", rec.ID).Str("path", m.Path).Msg("a mount of the VM could not be made again at its wake")
		}
	}
}

// Unmount removes the mount at guestPath from a tenant's VM.
func (s *Service) Unmount(ctx context.Context, tenantID, vmID, guestPath string) error {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return err
	}
	if guestPath == "" {
		return fieldError(gateway.CodeInvalidArgument, "path", "path is required: the mount's path in the VM")
	}
	if err := lv.vm.Unmount(ctx, guestPath); err != nil {
		if errors.Is(err, agentos.ErrNotFound) {
			return gateway.Wrap(gateway.CodeNotFound, err, "nothing is mounted at %s", guestPath).WithDetail("field", "path")
		}
		return EngineError(err, "unmount")
	}
	_, err = s.store.UpdateVMSpec(ctx, tenantID, vmID, func(vs *gateway.VMSpec) error {
		vs.Mounts = slices.DeleteFunc(vs.Mounts, func(m gateway.VMMount) bool { return m.Path == guestPath })
		if len(vs.Mounts) == 0 {
			vs.Mounts = nil
		}
		return nil
	})
	return err
}

// SoftwarePackage is a software package linked into a VM, by the name the
// engine gives it, with the commands it provides.
type SoftwarePackage struct {
	Name     string
	Commands []string
}

// LinkedSoftware is the answer to linking a package into a VM.
type LinkedSoftware struct {
	// Package is the npm name the link asked for.
	Package string
	// Name is the engine's name of the package (empty when it provides no
	// command to find it by).
	Name string
	// Commands are the commands the package provides, and Agents the ACP
	// agents.
	Commands []string
	Agents   []string
	// Created is false when the VM had the package already (two links of
	// one package at once may both say true).
	Created bool
}

// Software lists the software packages linked into a tenant's VM.
func (s *Service) Software(ctx context.Context, tenantID, vmID string) ([]SoftwarePackage, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return nil, err
	}
	return softwareOf(ctx, lv.vm)
}

func softwareOf(ctx context.Context, vm *agentos.VM) ([]SoftwarePackage, error) {
	pkgs, err := vm.Software(ctx)
	if err != nil {
		return nil, EngineError(err, "list software")
	}
	out := make([]SoftwarePackage, len(pkgs))
	for i, p := range pkgs {
		out[i] = SoftwarePackage{Name: p.PackageName, Commands: orEmpty(p.Commands)}
	}
	return out, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// LinkSoftware links a software package the gateway has installed (an npm
// name such as @agentos-software/pi) into a tenant's running VM.
func (s *Service) LinkSoftware(ctx context.Context, tenantID, vmID, pkg string) (LinkedSoftware, error) {
	lv, err := s.lookup(ctx, tenantID, vmID)
	if err != nil {
		return LinkedSoftware{}, err
	}
	switch {
	case pkg == "":
		return LinkedSoftware{}, fieldError(gateway.CodeInvalidArgument, "package", "package is required: an installed package such as @agentos-software/pi")
	case !packageName.MatchString(pkg):
		return LinkedSoftware{}, fieldError(gateway.CodeInvalidArgument, "package", "package %q must be a package name such as @agentos-software/pi", pkg)
	case s.cfg.Software != nil && !s.cfg.Software.Installed(pkg):
		return LinkedSoftware{}, fieldError(gateway.CodeInvalidArgument, "package", "software %q is not installed in this gateway", pkg)
	}
	had := lv.vm.HasSoftware(pkg)
	linked, err := lv.vm.LinkSoftware(ctx, pkg)
	if err != nil {
		return LinkedSoftware{}, EngineError(err, "link software")
	}
	out := LinkedSoftware{Package: pkg, Commands: []string{}, Agents: []string{}, Created: !had}
	for _, c := range linked.ProjectedCommands {
		out.Commands = append(out.Commands, c.Name)
	}
	for _, a := range linked.Agents {
		out.Agents = append(out.Agents, a.ID)
	}
	if len(out.Commands) == 0 {
		return out, nil
	}
	// The engine's answer does not name the package; the one of its
	// listing that provides the commands just linked is it.
	after, err := softwareOf(ctx, lv.vm)
	if err != nil {
		return LinkedSoftware{}, err
	}
	for _, p := range after {
		if slices.Contains(p.Commands, out.Commands[0]) {
			out.Name = p.Name
			break
		}
	}
	return out, nil
}
