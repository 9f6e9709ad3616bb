package agentmcp

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// PreviewInput is open_preview's input.
type PreviewInput struct {
	VM         string `json:"vm" jsonschema:"the VM's id"`
	Port       int    `json:"port" jsonschema:"the port a server of the VM listens on"`
	TTLSeconds int    `json:"ttlSeconds,omitempty" jsonschema:"how long the URL works, in seconds (default: an hour)"`
}

// PreviewInfo is open_preview's output.
type PreviewInfo struct {
	ID        string    `json:"id"`
	URL       string    `json:"url" jsonschema:"opens the port without a key until it expires"`
	HostURL   string    `json:"hostUrl,omitempty" jsonschema:"the same on a host of its own, when the gateway has a preview domain"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func (t *tools) addPreviewTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "open_preview", Title: "Open a preview URL",
		Description: "Returns a URL that opens a port of a VM in a browser, without the API key, until it expires.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)}},
		handle(func(ctx context.Context, _ *mcp.CallToolRequest, in PreviewInput) (PreviewInfo, error) {
			return answer(func(p *client.Preview) PreviewInfo {
				return PreviewInfo{ID: p.ID, URL: p.URL, HostURL: p.HostURL, ExpiresAt: p.ExpiresAt}
			})(t.c.VM(in.VM).CreatePreview(ctx, client.PreviewRequest{Port: in.Port, TTL: time.Duration(in.TTLSeconds) * time.Second}))
		}))
}
