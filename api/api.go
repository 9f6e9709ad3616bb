// Package api holds the gateway's HTTP API as it is on the wire: the OpenAPI
// document, and the Go shape of every JSON body, event and frame that exists
// only in HTTP (requests, resources, SSE event data, WebSocket frames), named
// after its schema in openapi.yaml. The handlers encode and decode these
// types, and so can a Go client. Domain values that the services produce and
// the handlers serve as they are (gateway.Tenant, gateway.ProcessInfo,
// gateway.VMEvent, ...) live in the root package instead.
//
// Package api imports only the standard library and the root package.
package api

import _ "embed"

// Spec is openapi.yaml, served at GET /v1/openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte
