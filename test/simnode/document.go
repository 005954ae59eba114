package simnode

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	yipschema "github.com/mudler/yip/pkg/schema"
	yiputils "github.com/mudler/yip/pkg/utils"
	"gopkg.in/yaml.v3"

	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/test/cloudconfig"
)

// plan is what a node makes of its bootstrap document.
type plan struct {
	distribution render.Distribution
	// role is control-plane for k0s controllers and k3s servers, worker otherwise.
	role render.Role
	// init is true for the node that creates the cluster (k0s controller without a token,
	// k3s server with --cluster-init or without --server).
	init  bool
	flags flags
	// files are the files the document writes, by path, as the node writes them.
	files map[string]string
	// commands are the commands the document runs, in order.
	commands []string
	// stageCommands are the commands of each stage (boot.before, network, ...), as yip loads
	// them.
	stageCommands map[string][]string
	// hostname is the templated hostname of the document, or empty.
	hostname string
	// stages are the document's stages, as yip loads them (steps with their if and commands).
	stages map[string][]yipschema.Stage
	// strict is Kairos' strict mode (top-level strict: true): kairos-agent then fails an
	// upgrade, install or reset whose hook stage fails; otherwise it logs and goes on.
	strict bool
}

// distributionBlock is what provider-kairos reads from k0s:, k0s-worker:, k3s: and k3s-agent:.
type distributionBlock struct {
	Enabled bool              `yaml:"enabled"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
}

type distributionsDoc struct {
	K0s       *distributionBlock `yaml:"k0s"`
	K0sWorker *distributionBlock `yaml:"k0s-worker"`
	K3s       *distributionBlock `yaml:"k3s"`
	K3sAgent  *distributionBlock `yaml:"k3s-agent"`
	// Strict is Kairos' strict mode.
	Strict bool `yaml:"strict"`
}

// refusal is a problem that stops the node for good: real nodes would fail the same way on
// every boot.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(reason string, format string, args ...any) error {
	return &refusal{reason: reason, err: fmt.Errorf(format, args...)}
}

// parseDocument loads a bootstrap document the way a Kairos node does. machineID feeds the
// hostname template ({{ .MachineID }}).
func parseDocument(doc []byte, machineID string) (*plan, error) {
	if err := cloudconfig.Check(doc); err != nil {
		return nil, refuse(ReasonBootstrapDataRefused, "%v", err)
	}
	files, err := cloudconfig.RenderedFiles(doc)
	if err != nil {
		return nil, refuse(ReasonBootstrapDataRefused, "rendering the files of the document: %v", err)
	}
	commands, err := cloudconfig.RenderedCommands(doc)
	if err != nil {
		return nil, refuse(ReasonBootstrapDataRefused, "rendering the commands of the document: %v", err)
	}
	stages, err := cloudconfig.Stages(doc)
	if err != nil {
		return nil, refuse(ReasonBootstrapDataRefused, "loading the stages of the document: %v", err)
	}
	p := &plan{files: files, commands: commands, stageCommands: map[string][]string{}, stages: stages}
	for name, steps := range stages {
		for _, st := range steps {
			p.stageCommands[name] = append(p.stageCommands[name], st.Commands...)
		}
	}
	if p.hostname, err = renderHostname(stages, machineID); err != nil {
		return nil, refuse(ReasonBootstrapDataRefused, "%v", err)
	}

	var d distributionsDoc
	if err := yaml.Unmarshal(doc, &d); err != nil {
		return nil, refuse(ReasonBootstrapDataRefused, "decoding the distribution blocks: %v", err)
	}
	p.strict = d.Strict
	var block *distributionBlock
	switch {
	case d.K0s != nil && d.K0s.Enabled:
		p.distribution, p.role, block = render.K0s, render.RoleControlPlane, d.K0s
	case d.K0sWorker != nil && d.K0sWorker.Enabled:
		p.distribution, p.role, block = render.K0s, render.RoleWorker, d.K0sWorker
	case d.K3s != nil && d.K3s.Enabled:
		p.distribution, p.role, block = render.K3s, render.RoleControlPlane, d.K3s
	case d.K3sAgent != nil && d.K3sAgent.Enabled:
		p.distribution, p.role, block = render.K3s, render.RoleWorker, d.K3sAgent
	default:
		return nil, refuse(ReasonBootstrapDataRefused, "the document enables none of k0s, k0s-worker, k3s or k3s-agent: the node would run no Kubernetes")
	}
	p.flags = parseArgs(block.Args)
	switch {
	case p.distribution == render.K0s && p.role == render.RoleControlPlane:
		p.init = !p.flags.has("token-file")
	case p.distribution == render.K3s && p.role == render.RoleControlPlane:
		p.init = p.flags.has("cluster-init") || !p.flags.has("server")
	}
	return p, nil
}

// renderHostname returns the hostname the document sets (in the initramfs stage), rendered
// the way yip renders it.
func renderHostname(stages map[string][]yipschema.Stage, machineID string) (string, error) {
	var hostname string
	for _, name := range []string{"initramfs.before", "initramfs", "initramfs.after", "boot.before", "boot", "boot.after"} {
		for _, s := range stages[name] {
			if s.Hostname != "" {
				hostname = s.Hostname
			}
		}
	}
	if hostname == "" {
		return "", nil
	}
	out, err := yiputils.TemplatedString(hostname, struct {
		UUID, Random, MachineID, ProtectedID string
	}{UUID: machineID[:8] + "-0000-4000-8000-" + machineID[20:32], Random: machineID, MachineID: machineID, ProtectedID: machineID})
	if err != nil {
		return "", fmt.Errorf("the hostname %q cannot be rendered: %w", hostname, err)
	}
	return strings.ToLower(strings.TrimSpace(out)), nil
}

// flags are the distribution's command-line arguments: name (without dashes) to values.
type flags map[string][]string

// booleanFlags never take a separate value.
var booleanFlags = map[string]bool{
	"enable-worker": true, "no-taints": true, "single": true, "cluster-init": true,
	"debug": true, "verbose": true, "disable-agent": true, "disable-etcd": true,
	"disable-apiserver": true, "enable-cloud-provider": true, "enable-dynamic-config": true,
}

// parseArgs splits args the way the distribution's flag parser sees them: an item may hold a
// flag and its value ("--taints=a:NoSchedule", "--labels a=b") or be the value of the
// previous flag.
func parseArgs(args []string) flags {
	var words []string
	for _, a := range args {
		words = append(words, strings.Fields(a)...)
	}
	f := flags{}
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") {
			continue
		}
		name := strings.TrimLeft(w, "-")
		if n, v, ok := strings.Cut(name, "="); ok {
			f[n] = append(f[n], v)
			continue
		}
		if !booleanFlags[name] && i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
			f[name] = append(f[name], words[i+1])
			i++
			continue
		}
		f[name] = append(f[name], "true")
	}
	return f
}

func (f flags) has(name string) bool { return len(f[name]) > 0 }

// value returns the last value of a flag.
func (f flags) value(name string) string {
	v := f[name]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func (f flags) bool(name string) bool {
	v := f.value(name)
	return v != "" && v != "false"
}

// list returns the comma-separated values of a flag, over all its occurrences.
func (f flags) list(name string) []string {
	var out []string
	for _, v := range f[name] {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// tokenFile returns the content of the file --token-file names, or --token.
func (p *plan) token() (string, error) {
	if path := p.flags.value("token-file"); path != "" {
		t, ok := p.files[path]
		if !ok {
			return "", refuse(ReasonBootstrapDataRefused, "--token-file %s: the document does not write that file", path)
		}
		return strings.TrimSpace(t), nil
	}
	if t := p.flags.value("token"); t != "" {
		return t, nil
	}
	return "", refuse(ReasonBootstrapDataRefused, "no --token-file or --token: the node cannot join")
}

// agentToken returns what a k3s server reads as its agent token: the content of the file
// --agent-token-file names (which wins over --agent-token, as in k3s pkg/cli/server/server.go),
// or --agent-token, or "" when the server is given none.
func (p *plan) agentToken() (string, error) {
	if path := p.flags.value("agent-token-file"); path != "" {
		t, ok := p.files[path]
		if !ok {
			return "", refuse(ReasonBootstrapDataRefused, "--agent-token-file %s: the document does not write that file", path)
		}
		return strings.TrimSpace(t), nil
	}
	return p.flags.value("agent-token"), nil
}

// file returns a file the document writes.
func (p *plan) file(path string) ([]byte, error) {
	c, ok := p.files[path]
	if !ok {
		return nil, refuse(ReasonBootstrapDataRefused, "the document does not write %s", path)
	}
	return []byte(c), nil
}

var wantPattern = regexp.MustCompile(`(?m)^want=(\S+)\s*$`)

// wantedVersion is the version the document's preflight script requires, or empty when it
// ships none.
func (p *plan) wantedVersion() string {
	m := wantPattern.FindStringSubmatch(p.files[render.PreflightScript])
	if m == nil {
		return ""
	}
	return strings.Trim(m[1], `"'`)
}

// installedVersion is what `k0s version` / `k3s --version` prints on the machine: the given
// version, or else the wanted one with the distribution's build suffix.
func (p *plan) installedVersion(installed string) string {
	if installed != "" {
		return installed
	}
	want := p.wantedVersion()
	if want == "" {
		return ""
	}
	if strings.Contains(want, "+") {
		return want
	}
	if p.distribution == render.K3s {
		return want + "+k3s1"
	}
	return want + "+k0s.0"
}

// preflight runs the check of the document's preflight script: the installed distribution
// must match the wanted version (the Kubernetes part when no build is wanted; otherwise the
// whole version, or a release of the wanted build: v1.31.2+k0s matches v1.31.2+k0s.0).
func (p *plan) preflight(installed string) error {
	if _, ok := p.files[render.PreflightScript]; !ok {
		return nil
	}
	want := p.wantedVersion()
	if want == "" {
		return refuse(ReasonPreflightFailed, "%s has no want= line", render.PreflightScript)
	}
	have := installed
	if !strings.Contains(want, "+") {
		have, _, _ = strings.Cut(installed, "+")
	}
	if have != want && !strings.HasPrefix(installed, want+".") {
		shown := installed
		if shown == "" {
			shown = "none"
		}
		return refuse(ReasonPreflightFailed, "kairos-capi: installed %s version '%s' does not match the requested %s", p.distribution, shown, want)
	}
	return nil
}

// kubeletVersion is the version the node's kubelet reports.
func kubeletVersion(installed string) string {
	v, build, ok := strings.Cut(installed, "+")
	if !ok {
		return installed
	}
	if strings.HasPrefix(build, "k0s") {
		return v + "+k0s"
	}
	return v + "+" + build
}

// startsBootstrapUnit tells whether the document's commands start the unit that writes the
// Cluster API sentinel, and the unit and script exist.
func (p *plan) startsBootstrapUnit() bool {
	started := false
	for _, c := range p.commands {
		if strings.Contains(c, "systemctl start") && strings.Contains(c, render.BootstrapUnit) {
			started = true
		}
	}
	_, unit := p.files[render.BootstrapUnitPath]
	script := p.files[render.BootstrapScript]
	return started && unit && strings.Contains(script, sentinelPath)
}

// k0sAPI is the part of /etc/k0s/k0s.yaml the simulation reads.
type k0sAPI struct {
	Spec struct {
		API struct {
			ExternalAddress string   `yaml:"externalAddress"`
			Address         string   `yaml:"address"`
			Port            int      `yaml:"port"`
			SANs            []string `yaml:"sans"`
		} `yaml:"api"`
	} `yaml:"spec"`
}

// apiServing is how a server's API is reached, as its distribution configures it.
type apiServing struct {
	// host is the address the server serves: k0s' spec.api.externalAddress (else
	// spec.api.address), the first k3s --tls-san.
	host string
	// advertisedPort is where k0s sends clients (kube-proxy, the in-cluster "kubernetes"
	// Endpoints, its kubeconfigs): the port of a host:port externalAddress, else spec.api.port
	// (k0s pkg/apis/k0s/v1beta1/api.go; host:port accepted since k0s PR #6411,
	// https://github.com/k0sproject/k0s/pull/6411). 0 for k3s, whose clients keep using the
	// --server URL they were given.
	advertisedPort int
	// listenPort is the port the API server binds on the node: k0s spec.api.port, k3s
	// --https-listen-port; 6443 by default in both.
	listenPort int
}

// apiServing reads how a server serves its API: from the k0s ClusterConfig, or from k3s'
// --https-listen-port and --tls-san.
func (p *plan) apiServing() (apiServing, error) {
	if p.distribution == render.K0s {
		path := p.flags.value("config")
		if path == "" {
			path = k0sConfigPath
		}
		raw, err := p.file(path)
		if err != nil {
			return apiServing{}, err
		}
		var c k0sAPI
		if err := yaml.Unmarshal(raw, &c); err != nil {
			return apiServing{}, refuse(ReasonBootstrapDataRefused, "%s is not a k0s ClusterConfig: %v", path, err)
		}
		s := apiServing{host: c.Spec.API.ExternalAddress, listenPort: c.Spec.API.Port}
		if s.listenPort == 0 {
			s.listenPort = 6443
		}
		s.advertisedPort = s.listenPort
		if host, port, err := net.SplitHostPort(s.host); err == nil {
			n, err := strconv.Atoi(port)
			if err != nil || n < 1 || n > 65535 {
				return apiServing{}, refuse(ReasonBootstrapDataRefused, "%s: spec.api.externalAddress %q has no valid port", path, s.host)
			}
			s.host, s.advertisedPort = host, n
		}
		if s.host == "" {
			s.host = c.Spec.API.Address
		}
		if s.host == "" {
			return apiServing{}, refuse(ReasonBootstrapDataRefused, "%s sets no spec.api.externalAddress", path)
		}
		return s, nil
	}
	s := apiServing{listenPort: 6443}
	if v := p.flags.value("https-listen-port"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return apiServing{}, refuse(ReasonBootstrapDataRefused, "--https-listen-port %q is not a port", v)
		}
		s.listenPort = n
	}
	sans := p.flags.list("tls-san")
	if len(sans) == 0 {
		return apiServing{}, refuse(ReasonBootstrapDataRefused, "no --tls-san: the server would not serve the cluster endpoint")
	}
	s.host = sans[0]
	return s, nil
}

// serverURLEndpoint returns host:port of an https URL.
func serverURLEndpoint(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("%q is not an https URL", raw)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "443"), nil
	}
	return u.Host, nil
}

// taints parses taints written as key[=value]:Effect.
func parseTaints(items []string) ([]taint, error) {
	var out []taint
	for _, it := range items {
		kv, effect, ok := strings.Cut(it, ":")
		if !ok || effect == "" {
			return nil, fmt.Errorf("taint %q has no effect", it)
		}
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			return nil, errors.New("taint with an empty key")
		}
		switch effect {
		case "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			return nil, fmt.Errorf("taint %q: unknown effect %q", it, effect)
		}
		out = append(out, taint{key: k, value: v, effect: effect})
	}
	return out, nil
}

type taint struct{ key, value, effect string }

// parseLabels parses labels written as key=value.
func parseLabels(items []string) (map[string]string, error) {
	out := map[string]string{}
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q is not key=value", it)
		}
		out[k] = v
	}
	return out, nil
}
