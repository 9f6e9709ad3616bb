package handlers

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"

	"github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

// chiParam matches a chi path parameter, with or without a regexp:
// {vm} or {pid:[0-9]+}.
var chiParam = regexp.MustCompile(`\{([^{}:]+)(:[^{}]*)?\}`)

// normalizeRoute turns a chi pattern into the OpenAPI path it serves:
// "/v1/vms/{vm}/" (a subrouter's "/") is "/v1/vms/{vm}", a parameter's
// regexp is dropped, and a trailing wildcard (the rest of a guest port's
// path) is the parameter {path}.
func normalizeRoute(pattern string) string {
	p := chiParam.ReplaceAllString(pattern, "{$1}")
	if rest, ok := strings.CutSuffix(p, "/*"); ok {
		p = rest + "/{path}"
	}
	for len(p) > 1 && strings.HasSuffix(p, "/") {
		p = strings.TrimSuffix(p, "/")
	}
	return p
}

// routeOf matches r against the router ahead of routing (a middleware of
// /v1 runs before the route is known): the route as api/openapi.yaml
// spells it, "" when none matches, and the route's parameters.
func (s *Server) routeOf(r *http.Request) (string, *chi.Context) {
	rctx := chi.NewRouteContext()
	pattern := s.router.Find(rctx, r.Method, r.URL.Path)
	if pattern == "" {
		return "", rctx
	}
	return normalizeRoute(pattern), rctx
}

// byOperation looks an operation up in a table keyed "METHOD /route", a
// HEAD as its GET when the table has no HEAD of its own.
func byOperation[T any](table map[string]T, method, route string) (T, bool) {
	v, ok := table[method+" "+route]
	if !ok && method == http.MethodHead {
		v, ok = table[http.MethodGet+" "+route]
	}
	return v, ok
}

// queryParams are the query parameters each operation of api/openapi.yaml
// takes, by "METHOD /path".
type queryParams map[string][]string

// specQueryParams reads the query parameters of every operation from the
// embedded OpenAPI document, once.
var specQueryParams = sync.OnceValues(func() (queryParams, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	out := queryParams{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			names := []string{}
			for _, p := range slices.Concat(item.Parameters, op.Parameters) {
				if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
					names = append(names, p.Value.Name)
				}
			}
			slices.Sort(names)
			out[method+" "+path] = slices.Compact(names)
		}
	}
	return out, nil
})

// refuseUnknownQuery answers 400 to a request with a query parameter its
// operation does not take, naming it: a misspelt filter (labelSelector=
// for label=) would otherwise be ignored and answer as if no filter had
// been asked for. The query of a request passed on to a guest's server
// (a route ending in a wildcard) is the guest's, and is not checked.
func (s *Server) refuseUnknownQuery(next http.Handler) http.Handler {
	params, err := specQueryParams()
	if err != nil {
		// The document is embedded in the binary: it cannot fail to load
		// in a build that passed its tests, and the API works without the
		// check.
		s.log.Error().Err(err).Msg("query parameters are not checked")
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		route, _ := s.routeOf(r)
		if route == "" || strings.HasSuffix(route, "/{path}") {
			next.ServeHTTP(w, r)
			return
		}
		allowed, ok := byOperation(params, r.Method, route)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		// Sorted, so that of several unknown parameters the same one is
		// named every time.
		for _, name := range slices.Sorted(maps.Keys(r.URL.Query())) {
			if slices.Contains(allowed, name) {
				continue
			}
			takes := "no query parameters"
			if len(allowed) > 0 {
				takes = "the query parameters " + strings.Join(allowed, ", ")
			}
			writeError(w, r, gateway.Errorf(gateway.CodeInvalidArgument, "unknown query parameter %q: %s %s takes %s", name, r.Method, route, takes).
				WithDetail("field", name))
			return
		}
		next.ServeHTTP(w, r)
	})
}
