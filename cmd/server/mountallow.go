package main

import "strings"

// mountAllowFlag is --mount-allow: repeatable, each value a comma-separated
// list of PATH[:ro|:rw] (vmspec.ParseMountAllow reads them). Flags given on the
// command line replace the environment variable's value, as for every flag.
type mountAllowFlag struct {
	values []string
	set    bool
}

func (f *mountAllowFlag) String() string { return strings.Join(f.values, ",") }

func (f *mountAllowFlag) Set(v string) error {
	if !f.set {
		f.values, f.set = nil, true
	}
	f.values = append(f.values, v)
	return nil
}
