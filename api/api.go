// Package api embeds the gateway's OpenAPI document.
package api

import _ "embed"

// Spec is openapi.yaml, served at GET /v1/openapi.yaml.
//
//go:embed openapi.yaml
var Spec []byte
