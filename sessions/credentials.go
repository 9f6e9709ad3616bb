package sessions

import (
	"fmt"
	"strings"

	"github.com/agentos-gateway/agentos-gateway"
)

// agentCredentials names, for the agents known to need them, the
// environment variables that give the agent access to its model; a
// session needs one of them set, in its env or its VM's. Without any,
// Claude Code answers every prompt with a successful turn whose text asks
// to log in ("Not logged in · Please run /login"): the gateway makes that a
// problem the caller sees instead.
var agentCredentials = map[string][]string{
	"claude": {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"},
}

// missingCredentials returns the variables of which agent needs one when
// none of them is set (non-empty) in any of envs, and nil otherwise.
func missingCredentials(agent string, envs ...map[string]string) []string {
	vars := agentCredentials[agent]
	for _, v := range vars {
		for _, env := range envs {
			if env[v] != "" {
				return nil
			}
		}
	}
	return vars
}

// errNoCredentials is the problem of a prompt to a session whose agent
// has no model credentials.
func errNoCredentials(agent string, vars []string) error {
	return gateway.Errorf(gateway.CodeUnprocessable,
		"agent %q has no model credentials, so it cannot answer: open the session with one of %s in its env (or create the VM with it)",
		agent, strings.Join(vars, ", ")).
		WithDetail("reason", "agent_credentials_missing").WithDetail("env", vars).WithDetail("field", fmt.Sprintf("env.%s", vars[0]))
}
