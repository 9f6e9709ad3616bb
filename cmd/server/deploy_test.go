package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentos-gateway/agentos-gateway/api"
)

// The deployment files are not run here (no Docker engine or cluster on
// these machines): these tests parse them and hold their ports, flags,
// environment variables and probe paths against the server's own.

// repoFile reads a file of the repository (the tests run in cmd/server).
func repoFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serverEnv is every environment variable the server reads, from its own
// --help: one per flag, and the others it lists.
func serverEnv(t *testing.T) map[string]bool {
	t.Helper()
	_, err := parseConfig([]string{"--help"}, func(string) string { return "" })
	var help *helpRequested
	if !errors.As(err, &help) {
		t.Fatalf("--help: %v", err)
	}
	out := map[string]bool{}
	for _, name := range regexp.MustCompile(`AGENTOS_[A-Z_]+`).FindAllString(help.usage, -1) {
		out[name] = true
	}
	if !out["AGENTOS_GATEWAY_CLUSTER_SECRET"] || !out["AGENTOS_GATEWAY_NODE_ID"] {
		t.Fatalf("--help lists %v", out)
	}
	return out
}

// specPaths are the routes of api/openapi.yaml.
func specPaths(t *testing.T) map[string]bool {
	t.Helper()
	var doc struct {
		Paths map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.Spec, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for p := range doc.Paths {
		out[p] = true
	}
	return out
}

// checkServerEnv holds a set of environment variables against the server:
// every AGENTOS_GATEWAY_ one is one it reads, and the configuration they
// make parses. It returns the listen port.
func checkServerEnv(t *testing.T, where string, env map[string]string) string {
	t.Helper()
	known := serverEnv(t)
	for k := range env {
		if strings.HasPrefix(k, "AGENTOS_") && !known[k] {
			t.Errorf("%s: %s is not a variable the gateway reads", where, k)
		}
	}
	c, err := parseConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Errorf("%s: the gateway refuses this configuration: %v", where, err)
	}
	if s := env["AGENTOS_GATEWAY_CLUSTER_SECRET"]; s != "" && len(s) < 16 {
		t.Errorf("%s: the cluster secret is shorter than 16 characters", where)
	}
	if !strings.HasPrefix(c.storeDSN, "postgres://") {
		t.Errorf("%s: store %q; several nodes need PostgreSQL", where, c.storeDSN)
	}
	_, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		t.Fatalf("%s: listen address %q: %v", where, c.addr, err)
	}
	if u, err := url.Parse(c.advertiseAddr); err != nil || u.Port() != port {
		t.Errorf("%s: advertise address %q is not on the listen port %s", where, c.advertiseAddr, port)
	}
	return port
}

// instruction is one instruction of a Dockerfile.
type instruction struct{ op, args string }

// parseDockerfile returns a Dockerfile's instructions, continuation lines
// joined, comments dropped.
func parseDockerfile(b []byte) []instruction {
	var out []instruction
	var cur strings.Builder
	for line := range strings.SplitSeq(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(repoFile(t, "docker/Dockerfile"))
	var (
		stages               int
		user, expose, health string
		env                  = map[string]string{}
	)
	for _, in := range ins {
		switch in.op {
		case "FROM":
			stages++
			user, expose, health = "", "", ""
			clear(env)
		case "USER":
			user = in.args
		case "EXPOSE":
			expose = in.args
		case "HEALTHCHECK":
			health = in.args
		case "ENV":
			for _, kv := range regexp.MustCompile(`(\w+)=(\S+)`).FindAllStringSubmatch(in.args, -1) {
				env[kv[1]] = kv[2]
			}
		case "COPY":
			// Sources from the build context must exist in the repository.
			fields := strings.Fields(in.args)
			if strings.HasPrefix(fields[0], "--from") {
				continue
			}
			for _, src := range fields[:len(fields)-1] {
				if src == "." {
					continue
				}
				if _, err := os.Stat(filepath.Join("..", "..", src)); err != nil {
					t.Errorf("COPY %s: %v", src, err)
				}
			}
		}
	}
	if stages < 2 {
		t.Errorf("%d stages; want a multi-stage build", stages)
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("the image runs as %q; want a non-root user", user)
	}
	known := serverEnv(t)
	for k := range env {
		if strings.HasPrefix(k, "AGENTOS_") && !known[k] {
			t.Errorf("ENV %s is not a variable the gateway reads", k)
		}
	}
	c, err := parseConfig(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("the image's ENV: %v", err)
	}
	_, port, _ := net.SplitHostPort(c.addr)
	if expose != port {
		t.Errorf("EXPOSE %q; the gateway listens on %s (%s)", expose, port, c.addr)
	}
	if !strings.Contains(health, "http://127.0.0.1:"+port+"/readyz") || !specPaths(t)["/readyz"] {
		t.Errorf("HEALTHCHECK %q does not ask /readyz on port %s", health, port)
	}
	ignore := string(repoFile(t, ".dockerignore"))
	for _, want := range []string{".git", "**/node_modules"} {
		if !slices.Contains(strings.Fields(ignore), want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}

func TestCompose(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Build *struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			Hostname    string            `yaml:"hostname"`
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
			Image string `yaml:"image"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(repoFile(t, "docker/compose.yaml"), &compose); err != nil {
		t.Fatal(err)
	}
	// ${VAR:?message} is the operator's to set.
	placeholder := regexp.MustCompile(`\$\{(\w+):\?[^}]*\}`)
	ids := map[string]bool{}
	gateways := 0
	postgres := false
	for name, svc := range compose.Services {
		if strings.HasPrefix(svc.Image, "postgres:") {
			postgres = true
			continue
		}
		gateways++
		// The context is the repository root, seen from docker/.
		if svc.Build == nil || filepath.Clean(svc.Build.Context) != ".." || filepath.Clean(svc.Build.Dockerfile) != "docker/Dockerfile" {
			t.Errorf("%s: does not build docker/Dockerfile", name)
		}
		env := map[string]string{}
		for k, v := range svc.Environment {
			env[k] = placeholder.ReplaceAllStringFunc(v, func(string) string { return "a-value-of-at-least-24-characters" })
		}
		port := checkServerEnv(t, "compose "+name, env)
		id := env["AGENTOS_GATEWAY_NODE_ID"]
		if id == "" || ids[id] {
			t.Errorf("%s: node id %q missing or repeated", name, id)
		}
		ids[id] = true
		if u, _ := url.Parse(env["AGENTOS_GATEWAY_ADVERTISE_ADDR"]); u == nil || u.Hostname() != svc.Hostname {
			t.Errorf("%s: advertises %q, not its hostname %q", name, env["AGENTOS_GATEWAY_ADVERTISE_ADDR"], svc.Hostname)
		}
		if len(svc.Ports) != 1 || !strings.HasSuffix(svc.Ports[0], ":"+port) {
			t.Errorf("%s: ports %v do not publish the listen port %s", name, svc.Ports, port)
		}
		if !strings.Contains(strings.Join(svc.Healthcheck.Test, " "), "http://127.0.0.1:"+port+"/readyz") {
			t.Errorf("%s: health check %v does not ask /readyz on %s", name, svc.Healthcheck.Test, port)
		}
	}
	if !postgres || gateways < 2 {
		t.Errorf("compose has PostgreSQL %v and %d gateway nodes; want PostgreSQL and two nodes", postgres, gateways)
	}
}

// k8sObject is what the test reads of a Kubernetes manifest.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		ClusterIP   string `yaml:"clusterIP"`
		ServiceName string `yaml:"serviceName"`
		Selector    any    `yaml:"selector"`
		Ports       []struct {
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
		MaxUnavailable int `yaml:"maxUnavailable"`
		Template       struct {
			Spec struct {
				SecurityContext struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
				} `yaml:"securityContext"`
				Containers []k8sContainer `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sContainer struct {
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	ReadinessProbe k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  k8sProbe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop struct {
			Exec struct {
				Command []string `yaml:"command"`
			} `yaml:"exec"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
	} `yaml:"resources"`
}

func loadManifests(t *testing.T, files ...string) map[string]k8sObject {
	t.Helper()
	out := map[string]k8sObject{}
	for _, f := range files {
		dec := yaml.NewDecoder(bytes.NewReader(repoFile(t, "docker/k8s/"+f)))
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	return out
}

func TestKubernetesManifests(t *testing.T) {
	var kustomization struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(repoFile(t, "docker/k8s/kustomization.yaml"), &kustomization); err != nil {
		t.Fatal(err)
	}
	objs := loadManifests(t, append(kustomization.Resources, "secret.example.yaml")...)
	var sts *k8sObject
	for _, o := range objs {
		if o.Kind == "StatefulSet" {
			sts = &o
		}
	}
	if sts == nil || len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("no StatefulSet with one container in %v", objs)
	}
	headless, ok := objs["Service/"+sts.Spec.ServiceName]
	if !ok || headless.Spec.ClusterIP != "None" {
		t.Errorf("the StatefulSet's service %q is not a headless Service", sts.Spec.ServiceName)
	}
	if !sts.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Error("the pods may run as root")
	}
	c := sts.Spec.Template.Spec.Containers[0]
	secret := objs["Secret/agentos-gateway"]

	// The environment as the kubelet makes it: $(VAR) expanded, secrets
	// from the example Secret.
	env := map[string]string{}
	fields := map[string]string{"metadata.name": "gw-0", "metadata.namespace": "default"}
	expand := regexp.MustCompile(`\$\((\w+)\)`)
	fromSecret := map[string]bool{}
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != secret.Metadata.Name || secret.StringData[ref.Key] == "" {
				t.Errorf("%s comes from %s/%s, which secret.example.yaml does not have", e.Name, ref.Name, ref.Key)
			}
			v = secret.StringData[ref.Key]
			fromSecret[e.Name] = true
		case e.ValueFrom.FieldRef != nil:
			v = fields[e.ValueFrom.FieldRef.FieldPath]
		}
		env[e.Name] = expand.ReplaceAllStringFunc(v, func(m string) string { return env[m[2:len(m)-1]] })
	}
	for _, name := range []string{"AGENTOS_GATEWAY_STORE", "AGENTOS_GATEWAY_CLUSTER_SECRET", "AGENTOS_GATEWAY_ADMIN_KEY"} {
		if !fromSecret[name] {
			t.Errorf("%s does not come from a Secret", name)
		}
	}
	port := checkServerEnv(t, "statefulset", env)
	if env["AGENTOS_GATEWAY_NODE_ID"] != "gw-0" {
		t.Errorf("node id %q; want the pod name", env["AGENTOS_GATEWAY_NODE_ID"])
	}
	if u, _ := url.Parse(env["AGENTOS_GATEWAY_ADVERTISE_ADDR"]); u == nil || !strings.HasPrefix(u.Hostname(), "gw-0."+sts.Spec.ServiceName+".") {
		t.Errorf("advertise address %q is not the pod's name in the headless Service", env["AGENTOS_GATEWAY_ADVERTISE_ADDR"])
	}

	named := map[string]string{}
	for _, p := range c.Ports {
		named[p.Name] = itoa(uint64(p.ContainerPort))
	}
	if named["http"] != port {
		t.Errorf("container port http %q; the gateway listens on %s", named["http"], port)
	}
	paths := specPaths(t)
	for what, probe := range map[string]k8sProbe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if !paths[probe.HTTPGet.Path] || named[probe.HTTPGet.Port] != port {
			t.Errorf("%s probe %s on %q: not a route of the gateway on its port", what, probe.HTTPGet.Path, probe.HTTPGet.Port)
		}
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes %s and %s; want /readyz and /healthz", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	preStop := strings.Join(c.Lifecycle.PreStop.Exec.Command, " ")
	if !strings.Contains(preStop, "http://127.0.0.1:"+port+"/v1/nodes/$POD_NAME/drain") || !paths["/v1/nodes/{node}/drain"] {
		t.Errorf("preStop %q does not drain the node", preStop)
	}
	if c.Resources.Requests["memory"] == "" || c.Resources.Requests["cpu"] == "" {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}
	client, ok := objs["Service/agentos-gateway"]
	if !ok || len(client.Spec.Ports) != 1 || client.Spec.Ports[0].TargetPort != "http" || client.Spec.ClusterIP == "None" {
		t.Errorf("no client Service to the http port: %+v", client)
	}
	pdb, ok := objs["PodDisruptionBudget/"+sts.Metadata.Name]
	if !ok || pdb.Spec.MaxUnavailable != 1 {
		t.Errorf("no PodDisruptionBudget of at most one node: %+v", pdb)
	}
}
