package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentos-gateway/agentos-gateway/client"
)

// defaultURL is the gateway's own default listen address (--addr of
// cmd/server), so that a gateway started with `make run` needs no flag.
const defaultURL = "http://127.0.0.1:8080"

// The environment variables that configure the command.
const (
	envURL = "AGENTOS_URL"
	envKey = "AGENTOS_API_KEY"
)

// oldEnv are the names the examples once used for envURL and envKey; they
// are still read, after the new ones.
var oldEnv = map[string]string{envURL: "AGENTOS_GATEWAY_URL", envKey: "AGENTOS_GATEWAY_KEY"}

// envVar reads the environment variable name, or its old name.
func (a *app) envVar(name string) string {
	if v := a.getenv(name); v != "" {
		return v
	}
	return a.getenv(oldEnv[name])
}

// config is what `agentos login` stores.
type config struct {
	URL string `json:"url"`
	Key string `json:"key"`
}

// configPath is the file login writes: <user config dir>/agentos/config.json
// ($XDG_CONFIG_HOME or ~/.config on Linux).
func configPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the user's config directory: %w", err)
	}
	return filepath.Join(dir, "agentos", "config.json"), nil
}

// loadConfig reads the stored configuration; a missing file is an empty
// one.
func loadConfig() (config, error) {
	var c config
	p, err := configPath()
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read %s: %w", p, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("read %s: %w", p, err)
	}
	return c, nil
}

// saveConfig writes c readable by the user alone (the file holds a key),
// replacing the old file at once so that a crash never leaves half of it.
func saveConfig(c config) (string, error) {
	p, err := configPath()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	// The directory is the command's own: tighten one made earlier by
	// hand.
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("protect %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return p, nil
}

// settings resolves the gateway URL and key: flag, then environment, then
// the stored configuration, then the default URL (and no key).
func (a *app) settings() (gatewayURL, key string, err error) {
	gatewayURL, key = a.flagURL, a.flagKey
	if gatewayURL == "" {
		gatewayURL = a.envVar(envURL)
	}
	if key == "" {
		key = a.envVar(envKey)
	}
	if gatewayURL == "" || key == "" {
		c, err := loadConfig()
		if err != nil {
			return "", "", err
		}
		if gatewayURL == "" {
			gatewayURL = c.URL
		}
		if key == "" {
			key = c.Key
		}
	}
	if gatewayURL == "" {
		gatewayURL = defaultURL
	}
	return strings.TrimRight(gatewayURL, "/"), key, nil
}

// newClient makes a client for gatewayURL and key. Connections fail fast
// (a CLI user waits for the answer) and calls are retried less than the
// client's default, so an unreachable gateway is reported within seconds.
func (a *app) newClient(gatewayURL, key string) (*client.Client, error) {
	a.url = gatewayURL
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	c, err := client.New(gatewayURL, key,
		client.WithHTTPClient(&http.Client{Transport: tr}),
		client.WithUserAgent("agentos-cli/1"),
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 3}))
	if err != nil {
		return nil, usageError{msg: fmt.Sprintf("the gateway URL %q is not an http(s)://host[:port] URL", gatewayURL)}
	}
	return c, nil
}

// client returns a client configured as settings says.
func (a *app) client() (*client.Client, string, error) {
	u, key, err := a.settings()
	if err != nil {
		return nil, "", err
	}
	c, err := a.newClient(u, key)
	return c, key, err
}

// readLine reads one line of r, without its line ending.
func readLine(r *bufio.Reader) (string, error) {
	s, err := r.ReadString('\n')
	if err != nil && s == "" {
		return "", err
	}
	return strings.TrimRight(s, "\r\n"), nil
}
