package vmspec

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/internal/apispec"
)

// The limits the gateway accepts are the ones api/openapi.yaml documents,
// with the same bounds.
func TestLimitKeysMatchSpec(t *testing.T) {
	doc := apispec.MustLoad(t)
	s := doc.Components.Schemas["VMLimits"].Value
	if got, want := slices.Sorted(maps.Keys(s.Properties)), slices.Sorted(maps.Keys(LimitKeys)); !slices.Equal(got, want) {
		t.Fatalf("spec sections %v, Go %v", got, want)
	}
	for sec, keys := range LimitKeys {
		props := s.Properties[sec].Value.Properties
		if got, want := slices.Sorted(maps.Keys(props)), slices.Sorted(maps.Keys(keys)); !slices.Equal(got, want) {
			t.Errorf("%s: spec keys %v, Go %v", sec, got, want)
			continue
		}
		for k, lo := range keys {
			p := props[k].Value
			if p.Min == nil || *p.Min != float64(lo) || p.Max == nil || *p.Max != MaxLimit {
				t.Errorf("%s.%s: spec range %v..%v, Go %d..%d", sec, k, p.Min, p.Max, lo, uint64(MaxLimit))
			}
		}
	}
}

func TestCheckLimits(t *testing.T) {
	for _, c := range []struct {
		name   string
		limits map[string]any
		field  string // "" when accepted
		msg    string
	}{
		{"none", nil, "", ""},
		{"documented", map[string]any{"resources": map[string]any{"maxProcesses": 0.0, "maxFilesystemBytes": 1e9}, "reactor": map[string]any{"maxTasks": 1.0}}, "", ""},
		{"largest", map[string]any{"acp": map[string]any{"maxPromptBytes": float64(MaxLimit)}}, "", ""},
		{"unknown section", map[string]any{"memory": map[string]any{}}, "limits.memory", "unknown limits section \"memory\"; the sections are acp, execution"},
		{"unknown key", map[string]any{"reactor": map[string]any{"bogus": 1.0}}, "limits.reactor.bogus", "unknown limit \"limits.reactor.bogus\"; the limits of reactor are acceptQuantum, byteQuantum"},
		{"section not an object", map[string]any{"reactor": "x"}, "limits.reactor", "limits.reactor must be an object"},
		{"string", map[string]any{"reactor": map[string]any{"maxTasks": "1"}}, "limits.reactor.maxTasks", "limits.reactor.maxTasks must be an integer from 1 to 9007199254740991"},
		{"zero where refused", map[string]any{"reactor": map[string]any{"maxTasks": 0.0}}, "limits.reactor.maxTasks", "from 1 to"},
		{"negative", map[string]any{"resources": map[string]any{"maxProcesses": -1.0}}, "limits.resources.maxProcesses", "from 0 to"},
		{"fraction", map[string]any{"resources": map[string]any{"maxProcesses": 1.5}}, "limits.resources.maxProcesses", "must be an integer"},
		{"too large", map[string]any{"resources": map[string]any{"maxProcesses": 1e20}}, "limits.resources.maxProcesses", "must be an integer"},
		{"nested object", map[string]any{"resources": map[string]any{"maxProcesses": map[string]any{}}}, "limits.resources.maxProcesses", "must be an integer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckLimits(c.limits)
			if c.field == "" {
				if err != nil {
					t.Fatalf("CheckLimits = %v", err)
				}
				return
			}
			var ge *gateway.Error
			if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidArgument || ge.Details["field"] != c.field || !strings.Contains(ge.Message, c.msg) {
				t.Fatalf("CheckLimits = %v, want field %s and %q", err, c.field, c.msg)
			}
		})
	}
}

// The engine names its limits in two spellings; the caller is told the
// documented one, and only for limits that exist.
func TestRefusedLimits(t *testing.T) {
	for msg, want := range map[string][]string{
		"limits.acp.maxCompletedMessageBytes (67108864) must be <= limits.acp.maxTurnOutputBytes (0)": {"limits.acp.maxCompletedMessageBytes", "limits.acp.maxTurnOutputBytes"},
		"limits.js_runtime.v8_heap_limit_mb must be greater than zero":                                {"limits.jsRuntime.v8HeapLimitMb"},
		"limits.plugins.max_persisted_manifest_bytes must be greater than zero":                       {"limits.plugins.maxPersistedManifestBytes"},
		"build root filesystem: bundled base filesystem contains 15647 bytes, exceeding limit 0":      nil,
		"limits.nothing.here and limits.reactor.maxTasks twice limits.reactor.maxTasks":               {"limits.reactor.maxTasks"},
	} {
		if got := RefusedLimits(msg); !slices.Equal(got, want) {
			t.Errorf("RefusedLimits(%q) = %v, want %v", msg, got, want)
		}
	}
}
