package bindings

import (
	"encoding/json"
	"fmt"
	"regexp"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// Bounds of a VM's bindings: they are registered with the engine and shown
// to agents in full, so they stay small.
const (
	MaxCollections     = 16
	MaxBindings        = 64 // per collection
	MaxExamples        = 8  // per binding
	MaxDescription     = 2048
	MaxSchemaBytes     = 64 << 10
	MaxTimeoutMs       = 120_000
	MinTimeoutMs       = 100
	DefaultTimeoutMs   = 30_000
	maxExampleBytes    = 16 << 10
	maxWebhookURLBytes = 2048
)

// Names: a collection becomes the guest command agentos-<name>, a binding
// its first argument; the engine joins them with a colon.
var (
	collectionName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	bindingName    = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)
)

// Validate checks bindings as declared; field prefixes the fields named in
// the error ("bindings" at VM create, "" for the document itself).
func (s *Service) Validate(b *gateway.Bindings, field string) error {
	if b == nil {
		return nil
	}
	at := func(f string, args ...any) string {
		f = fmt.Sprintf(f, args...)
		if field == "" {
			return f
		}
		return field + "." + f
	}
	bad := func(path, format string, args ...any) error {
		return gateway.Errorf(gateway.CodeInvalidArgument, "%s "+format, append([]any{path}, args...)...).WithDetail("field", path)
	}
	if len(b.Collections) > MaxCollections {
		return bad(at("collections"), "has %d collections; at most %d are allowed", len(b.Collections), MaxCollections)
	}
	seen := map[string]bool{}
	for i, c := range b.Collections {
		p := at("collections[%d]", i)
		switch {
		case !collectionName.MatchString(c.Name):
			return bad(p+".name", "must be 1 to 32 lower-case letters, digits and hyphens, starting with a letter (the guest runs it as agentos-<name>)")
		case seen[c.Name]:
			return bad(p+".name", "repeats collection %q", c.Name)
		case c.Description == "":
			return bad(p+".description", "is required: agents read it to know what the collection is for")
		case len(c.Description) > MaxDescription:
			return bad(p+".description", "is longer than %d bytes", MaxDescription)
		case len(c.Bindings) == 0:
			return bad(p+".bindings", "must declare at least one binding")
		case len(c.Bindings) > MaxBindings:
			return bad(p+".bindings", "has %d bindings; at most %d are allowed", len(c.Bindings), MaxBindings)
		}
		seen[c.Name] = true
		names := map[string]bool{}
		for j, bd := range c.Bindings {
			if err := s.validateBinding(bd, fmt.Sprintf("%s.bindings[%d]", p, j), names, bad); err != nil {
				return err
			}
		}
	}
	if b.PermissionWebhookURL != "" {
		if err := s.CheckURL(b.PermissionWebhookURL); err != nil {
			return bad(at("permissionWebhookUrl"), "%v", err)
		}
	}
	return nil
}

func (s *Service) validateBinding(bd gateway.Binding, p string, names map[string]bool, bad func(path, format string, args ...any) error) error {
	switch {
	case !bindingName.MatchString(bd.Name):
		return bad(p+".name", "must be 1 to 64 lower-case letters, digits, hyphens and underscores, starting with a letter")
	case names[bd.Name]:
		return bad(p+".name", "repeats binding %q", bd.Name)
	case bd.Description == "":
		return bad(p+".description", "is required: agents read it to know when to call the binding")
	case len(bd.Description) > MaxDescription:
		return bad(p+".description", "is longer than %d bytes", MaxDescription)
	case len(bd.InputSchema) == 0:
		return bad(p+".inputSchema", "is required: a JSON Schema object such as {\"type\":\"object\"}")
	case len(bd.InputSchema) > MaxSchemaBytes:
		return bad(p+".inputSchema", "is longer than %d bytes", MaxSchemaBytes)
	case !isObject(bd.InputSchema):
		return bad(p+".inputSchema", "must be a JSON Schema object such as {\"type\":\"object\"}")
	case bd.TimeoutMs != 0 && (bd.TimeoutMs < MinTimeoutMs || bd.TimeoutMs > MaxTimeoutMs):
		return bad(p+".timeoutMs", "must be between %d and %d (or absent for %d)", MinTimeoutMs, MaxTimeoutMs, DefaultTimeoutMs)
	case len(bd.Examples) > MaxExamples:
		return bad(p+".examples", "has %d examples; at most %d are allowed", len(bd.Examples), MaxExamples)
	case bd.WebhookURL == "":
		return bad(p+".webhookUrl", "is required")
	case len(bd.WebhookURL) > maxWebhookURLBytes:
		return bad(p+".webhookUrl", "is longer than %d bytes", maxWebhookURLBytes)
	}
	names[bd.Name] = true
	for k, ex := range bd.Examples {
		ep := fmt.Sprintf("%s.examples[%d]", p, k)
		switch {
		case len(ex.Description) > MaxDescription:
			return bad(ep+".description", "is longer than %d bytes", MaxDescription)
		case len(ex.Input) > maxExampleBytes:
			return bad(ep+".input", "is longer than %d bytes", maxExampleBytes)
		case !isObject(ex.Input):
			return bad(ep+".input", "must be a JSON object: an input of the binding")
		}
	}
	if err := s.CheckURL(bd.WebhookURL); err != nil {
		return bad(p+".webhookUrl", "%v", err)
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}
