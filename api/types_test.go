package api_test

import (
	"go/token"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
	"github.com/agentos-gateway/agentos-gateway/bindings"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// wireShapes are the Go shapes of the API, of package api and of the root
// package, each with the schema it is on the wire and whether the gateway
// sends it (a response, an event, a frame) rather than receives it.
var wireShapes = []struct {
	schema string
	v      any
	sends  bool
}{
	// Package api: VMs, exec and processes.
	{"CreateVMRequest", api.CreateVMRequest{}, false},
	{"UpdateVMRequest", api.UpdateVMRequest{}, false},
	{"NetworkRules", api.NetworkRules{}, false},
	{"ExecAccepted", api.ExecAccepted{}, true},
	{"CreateWebhookRequest", api.CreateWebhookRequest{}, false},
	{"UpdateWebhookRequest", api.UpdateWebhookRequest{}, false},
	{"Webhook", api.Webhook{}, true},
	{"WebhookList", api.List[api.Webhook]{}, true},
	{"Delivery", api.Delivery{}, true},
	{"DeliveryList", api.List[api.Delivery]{}, true},
	{"WebhookEvent", gateway.WebhookBody{}, true},
	{"VMStateData", gateway.VMStateData{}, true},
	{"ProcessExitData", gateway.ProcessExitData{}, true},
	{"ExecDoneData", gateway.ExecDoneData{}, true},
	{"EventProblem", gateway.EventProblem{}, true},
	{"SessionTurnEndData", gateway.SessionTurnEndData{}, true},
	{"SessionPermissionRequestedData", gateway.SessionPermissionRequestedData{}, true},
	{"ScheduleRunData", gateway.ScheduleRunData{}, true},
	{"SnapshotReadyData", gateway.SnapshotReadyData{}, true},
	{"WebhookDisabledData", gateway.WebhookDisabledData{}, true},
	{"NetworkRule", api.NetworkRule{}, false},
	{"VM", api.VM{}, true},
	{"VMList", api.List[api.VM]{}, true},
	{"VMUsage", api.VMUsage{}, true},
	{"UsageProcesses", api.UsageProcesses{}, true},
	{"UsageHandles", api.UsageHandles{}, true},
	{"UsageLimits", api.UsageLimits{}, true},
	{"ExecRequest", api.ExecRequest{}, false},
	{"SpawnRequest", api.SpawnRequest{}, false},
	// Invocation is the part of exec and spawn bodies that says what to
	// run: all of a spawn body.
	{"SpawnRequest", api.Invocation{}, false},
	{"ExecResult", api.ExecResult{}, true},
	{"ExecExitEvent", api.ExecExitEvent{}, true},
	{"SignalRequest", api.SignalRequest{}, false},
	{"StdinWritten", api.StdinWritten{}, true},
	{"OutputEvent", api.OutputEvent{}, true},
	{"ProcessExitEvent", api.ProcessExitEvent{}, true},
	{"ProcessList", api.List[gateway.ProcessInfo]{}, true},

	// Schedules.
	{"CreateScheduleRequest", api.CreateScheduleRequest{}, false},
	{"ScheduleAction", api.ScheduleAction{}, true},
	{"ScheduleExec", api.ScheduleExec{}, true},
	{"SchedulePrompt", api.SchedulePrompt{}, true},
	{"Schedule", api.Schedule{}, true},
	{"ScheduleList", api.List[api.Schedule]{}, true},
	{"ScheduleRun", api.ScheduleRun{}, true},
	{"ScheduleRunList", api.List[api.ScheduleRun]{}, true},
	// Previews.
	{"CreatePreviewRequest", api.CreatePreviewRequest{}, false},
	{"Preview", api.Preview{}, true},
	{"PreviewList", api.List[api.Preview]{}, true},

	// Mounts and software.
	{"CreateMountRequest", api.CreateMountRequest{}, false},
	{"Mount", api.Mount{}, true},
	{"MountList", api.List[api.Mount]{}, true},
	{"LinkSoftwareRequest", api.LinkSoftwareRequest{}, false},
	{"Software", api.Software{}, true},
	{"SoftwareList", api.List[api.Software]{}, true},
	{"LinkedSoftware", api.LinkedSoftware{}, true},

	// Snapshots and fork.
	{"Snapshot", gateway.Snapshot{}, true},
	{"SnapshotList", api.List[gateway.Snapshot]{}, true},
	{"ForkRequest", api.ForkRequest{}, false},
	{"Forked", api.Forked{}, true},

	// Shells and attach.
	{"OpenShellRequest", api.OpenShellRequest{}, false},
	{"ShellCreated", api.ShellCreated{}, true},
	{"ResizeRequest", api.ResizeRequest{}, false},
	{"ShellList", api.List[gateway.ShellInfo]{}, true},
	{"AttachServerFrame", api.AttachServerFrame{}, true},

	// Files.
	{"FileWritten", api.FileWritten{}, true},
	{"ArchiveExtracted", api.ArchiveExtracted{}, true},
	{"MkdirRequest", api.MkdirRequest{}, false},
	{"DirCreated", api.DirCreated{}, true},
	{"MoveRequest", api.MoveRequest{}, false},
	{"Moved", api.Moved{}, true},
	{"Stat", api.Stat{}, true},
	{"DirList", api.List[gateway.DirEntry]{}, true},
	{"WatchEvent", api.WatchEvent{}, true},
	{"WatchResyncEvent", api.WatchResyncEvent{}, true},

	// Tenants, keys, sidecars, health.
	{"QuotasUpdate", api.QuotasUpdate{}, false},
	{"SessionSettingsUpdate", api.SessionSettingsUpdate{}, false},
	{"CreateTenantRequest", api.CreateTenantRequest{}, false},
	{"UpdateTenantRequest", api.UpdateTenantRequest{}, false},
	{"TenantList", api.List[gateway.Tenant]{}, true},
	// Key is omitempty in Go, and always there when a key is created; the
	// listed APIKey is the same without it (TestAPIKeyIsCreatedAPIKeyWithoutItsSecret).
	{"CreatedAPIKey", api.APIKey{}, false},
	{"CreateTokenRequest", api.CreateTokenRequest{}, false},
	{"Token", api.Token{}, true},
	{"CreatedToken", api.CreatedToken{}, true},
	{"TokenList", api.List[api.Token]{}, true},
	{"AuditRecord", api.AuditRecord{}, true},
	{"AuditList", api.List[api.AuditRecord]{}, true},
	{"APIKeyList", api.List[api.APIKey]{}, true},
	{"Sidecar", api.Sidecar{}, true},
	{"SidecarList", api.List[api.Sidecar]{}, true},
	{"Node", api.Node{}, true},
	{"Me", api.Me{}, true},
	{"LostEvent", api.LostEvent{}, true},
	{"NodeList", api.List[api.Node]{}, true},
	{"Health", api.Health{}, true},
	{"Ready", api.Ready{}, true},

	// Sessions.
	{"OpenSessionRequest", api.OpenSessionRequest{}, false},
	{"Session", api.Session{}, true},
	{"SessionList", api.List[api.Session]{}, true},
	{"PermissionList", api.List[gateway.Permission]{}, true},
	{"PromptRequest", api.PromptRequest{}, false},
	{"PromptAccepted", api.PromptAccepted{}, true},
	{"CancelResult", api.CancelResult{}, true},
	{"AnswerPermissionRequest", api.AnswerPermissionRequest{}, false},
	{"SessionConfig", api.SessionConfig{}, true},
	{"SetConfigRequest", api.SetConfigRequest{}, false},
	{"SessionHistory", api.SessionHistory{}, true},
	{"AgentList", api.List[gateway.Agent]{}, true},

	// Stream events and problems.
	{"GapEvent", api.GapEvent{}, true},
	{"ErrorEvent", api.ErrorEvent{}, true},
	{"Problem", api.Problem{}, true},

	// The root package: domain values served as they are.
	{"Tenant", gateway.Tenant{}, true},
	{"Quotas", gateway.Quotas{}, true},
	{"SessionSettings", gateway.SessionSettings{}, true},
	{"PermissionDefault", gateway.PermissionDefault{}, true},
	{"Permission", gateway.Permission{}, true},
	{"PermissionDecision", gateway.PermissionDecision{}, true},
	{"PermissionOption", gateway.PermissionOption{}, false},
	{"ExitStatus", gateway.ExitStatus{}, true},
	{"ProcessInfo", gateway.ProcessInfo{}, true},
	{"Shell", gateway.ShellInfo{}, true},
	{"DirEntry", gateway.DirEntry{}, true},
	{"VMEvent", gateway.VMEvent{}, true},
	{"Agent", gateway.Agent{}, true},
	{"PromptResult", gateway.PromptResult{}, true},
	{"PermissionAnswer", gateway.PermissionAnswer{}, true},
	{"SessionEvent", gateway.SessionEventData{}, true},
	{"EphemeralEvent", gateway.EphemeralEvent{}, true},
	{"AgentStderrEvent", gateway.AgentStderrEvent{}, true},
	{"AgentExitEvent", gateway.AgentExitEvent{}, true},
	{"OverflowEvent", gateway.OverflowEvent{}, true},
	{"SessionEndEvent", gateway.SessionEndEvent{}, true},

	// Host bindings, and the bodies of the gateway's webhook requests.
	{"Bindings", gateway.Bindings{}, true},
	{"BindingCollection", gateway.BindingCollection{}, true},
	{"Binding", gateway.Binding{}, true},
	{"BindingExample", gateway.BindingExample{}, true},
	{"PermissionVerdict", gateway.PermissionVerdict{}, false},
	{"WebhookSecret", api.WebhookSecret{}, true},
	{"BindingCallRequest", bindings.CallRequest{}, true},
	{"PermissionWebhookRequest", bindings.PermissionRequest{}, true},
}

// controlFrameSchemas are the schemas of the client's attach frames: one Go
// type decodes both, and the handler checks which fields each type takes.
var controlFrameSchemas = []string{"AttachShellControl", "AttachProcessControl"}

// notWire are the root package's JSON-tagged structs that the API does not
// serve as they are, each with what it serves instead.
var notWire = map[string]string{
	"VM":         "api.VM, the record with its spec flattened",
	"VMSpec":     "its fields in api.VM (the store keeps it as JSON)",
	"APIKey":     "api.APIKey, without Admin and with the secret once",
	"Page":       "api.List, whose nextCursor is always there",
	"Session":    "api.Session, whose permissionDefault is always there",
	"Checkpoint": "the layers of a VM's checkpoint, kept by the store, never sent",
	"VMMount":    "api.Mount, which GET /v1/vms/{vm}/mounts lists from the engine",
}

// Every wire shape has exactly the fields of its schema, and a field the
// gateway sends is required in the schema exactly when Go always sends it.
func TestWireShapesMatchSchemas(t *testing.T) {
	doc := apispec.MustLoad(t)
	for _, c := range wireShapes {
		apispec.CheckType(t, doc, c.schema, c.v, c.sends)
	}
	var union []string
	for _, name := range controlFrameSchemas {
		union = append(union, slices.Collect(maps.Keys(doc.Components.Schemas[name].Value.Properties))...)
	}
	slices.Sort(union)
	union = slices.Compact(union)
	fields := slices.Sorted(maps.Keys(apispec.JSONFields(reflect.TypeFor[api.AttachControlFrame]())))
	if !slices.Equal(union, fields) {
		t.Errorf("AttachControlFrame fields %v, properties of %v %v", fields, controlFrameSchemas, union)
	}
}

// The listed key is the created one without its secret.
func TestAPIKeyIsCreatedAPIKeyWithoutItsSecret(t *testing.T) {
	doc := apispec.MustLoad(t)
	listed := append(slices.Collect(maps.Keys(doc.Components.Schemas["APIKey"].Value.Properties)), "key")
	sort.Strings(listed)
	created := slices.Sorted(maps.Keys(doc.Components.Schemas["CreatedAPIKey"].Value.Properties))
	if !slices.Equal(listed, created) {
		t.Errorf("APIKey properties and key %v, CreatedAPIKey %v", listed, created)
	}
}

// Every JSON-tagged struct of package api and of the root package is held
// against its schema above (or, in the root package, said not to be
// served), so that a new shape cannot go unchecked.
func TestEveryWireShapeIsHeld(t *testing.T) {
	held := map[string]bool{"api.AttachControlFrame": true}
	for _, c := range wireShapes {
		held[shapeName(reflect.TypeOf(c.v))] = true
	}
	for _, name := range exportedJSONStructs(t, ".") {
		if !held["api."+name] {
			t.Errorf("api.%s has JSON tags but is not held against a schema", name)
		}
	}
	for _, name := range exportedJSONStructs(t, "..") {
		_, excused := notWire[name]
		switch {
		case held["gateway."+name] && excused:
			t.Errorf("gateway.%s is held against a schema and said not to be served", name)
		case !held["gateway."+name] && !excused:
			t.Errorf("gateway.%s has JSON tags but is neither held against a schema nor said not to be served", name)
		}
	}
}

// shapeName is a type's package name and its name without type arguments:
// "api.List" for api.List[api.VM].
func shapeName(t reflect.Type) string {
	name, _, _ := strings.Cut(t.Name(), "[")
	return pkgName(t) + "." + name
}

// pkgName is the name a type's package is known by here: the root
// package's path does not end in its name.
func pkgName(t reflect.Type) string {
	if t.PkgPath() == reflect.TypeFor[gateway.Tenant]().PkgPath() {
		return "gateway"
	}
	return filepath.Base(t.PkgPath())
}

// exportedJSONStructs returns the exported JSON-tagged struct types of the
// Go package in dir.
func exportedJSONStructs(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, st := range apispec.JSONStructs(t, dir) {
		if token.IsExported(st.Name) {
			out = append(out, st.Name)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no JSON-tagged structs in %s: the scan reads the wrong folder", dir)
	}
	return out
}
