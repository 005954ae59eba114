package render

import (
	"bytes"
	"errors"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"text/template"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/cloudconfig"
	"github.com/kairos-capi/kairos-capi/common/merge"
	"github.com/kairos-capi/kairos-capi/common/token"
)

func mustRender(t *testing.T, n Node) *cloudconfig.Config {
	t.Helper()
	c, err := Render(n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func allFiles(c *cloudconfig.Config) map[string]cloudconfig.File {
	out := map[string]cloudconfig.File{}
	for _, steps := range c.Stages {
		for _, s := range steps {
			for _, f := range s.Files {
				out[f.Path] = f
			}
		}
	}
	return out
}

func TestRolesAndArgs(t *testing.T) {
	p := fixturePKI(t)
	cases := []struct {
		name    string
		node    func() Node
		block   func(c *cloudconfig.Config) *cloudconfig.Distribution
		args    []string
		without []string
		files   []string
		absent  []string
		service string
	}{
		{
			name:    "k0s init control plane",
			node:    func() Node { n := node(K0s, RoleControlPlane); n.Init = true; n.PKI = p; return n },
			block:   func(c *cloudconfig.Config) *cloudconfig.Distribution { return c.K0s },
			args:    []string{"--config=/etc/k0s/k0s.yaml", "--enable-worker"},
			without: []string{"--single", "--no-taints", "--token-file=/etc/k0s/token"},
			files:   []string{K0sConfigPath, K0sPKIDir + "/ca.crt", K0sPKIDir + "/ca.key", K0sPKIDir + "/sa.key", K0sPKIDir + "/sa.pub", K0sPKIDir + "/front-proxy-ca.crt", K0sPKIDir + "/front-proxy-ca.key", K0sPKIDir + "/etcd/ca.crt", K0sPKIDir + "/etcd/ca.key"},
			service: "k0scontroller",
		},
		{
			name: "k0s join control plane",
			node: func() Node {
				n := node(K0s, RoleControlPlane)
				n.PKI = p
				n.JoinToken = k0sToken(t, p, token.K0sControllerToken)
				return n
			},
			block:   func(c *cloudconfig.Config) *cloudconfig.Distribution { return c.K0s },
			args:    []string{"--config=/etc/k0s/k0s.yaml", "--enable-worker", "--token-file=/etc/k0s/token"},
			without: []string{"--single", "--no-taints"},
			files:   []string{K0sTokenPath, K0sPKIDir + "/sa.key", K0sPKIDir + "/etcd/ca.key", K0sPKIDir + "/front-proxy-ca.key"},
			absent:  []string{K0sPKIDir + "/ca.crt", K0sPKIDir + "/ca.key"},
			service: "k0scontroller",
		},
		{
			name:    "k0s single node",
			node:    func() Node { n := node(K0s, RoleControlPlane); n.Init = true; n.SingleNode = true; n.PKI = p; return n },
			block:   func(c *cloudconfig.Config) *cloudconfig.Distribution { return c.K0s },
			args:    []string{"--enable-worker", "--no-taints"},
			without: []string{"--single"},
			service: "k0scontroller",
		},
		{
			name:    "k0s worker",
			node:    func() Node { n := node(K0s, RoleWorker); n.JoinToken = k0sToken(t, p, token.K0sWorkerToken); return n },
			block:   func(c *cloudconfig.Config) *cloudconfig.Distribution { return c.K0sWorker },
			args:    []string{"--token-file=/etc/k0s/token", "--taints=node.cluster.x-k8s.io/uninitialized:NoSchedule"},
			files:   []string{K0sTokenPath},
			service: "k0sworker",
		},
		{
			name: "k3s init server",
			node: func() Node {
				n := node(K3s, RoleControlPlane)
				n.Init = true
				n.PKI = p
				setK3sTokens(t, p, &n)
				return n
			},
			block:   func(c *cloudconfig.Config) *cloudconfig.Distribution { return c.K3s },
			args:    []string{"--cluster-init", "--token-file=/etc/rancher/k3s/token", "--agent-token-file=/etc/rancher/k3s/agent-token", "--tls-san=api.demo.example.com", "--https-listen-port=6443", "--node-taint=node-role.kubernetes.io/control-plane:NoSchedule"},
			without: []string{"--server=https://api.demo.example.com:6443"},
			files:   []string{K3sTokenPath, K3sAgentTokenPath, K3sTLSDir + "/server-ca.crt", K3sTLSDir + "/server-ca.key", K3sTLSDir + "/client-ca.crt", K3sTLSDir + "/client-ca.key", K3sTLSDir + "/request-header-ca.crt", K3sTLSDir + "/request-header-ca.key", K3sTLSDir + "/etcd/server-ca.crt", K3sTLSDir + "/etcd/server-ca.key", K3sTLSDir + "/etcd/peer-ca.crt", K3sTLSDir + "/etcd/peer-ca.key", K3sTLSDir + "/service.key"},
			service: "k3s",
		},
		{
			name:    "k3s join server",
			node:    func() Node { n := node(K3s, RoleControlPlane); n.PKI = p; setK3sTokens(t, p, &n); return n },
			block:   func(c *cloudconfig.Config) *cloudconfig.Distribution { return c.K3s },
			args:    []string{"--server=https://api.demo.example.com:6443", "--token-file=/etc/rancher/k3s/token", "--agent-token-file=/etc/rancher/k3s/agent-token", "--tls-san=api.demo.example.com", "--node-taint=node-role.kubernetes.io/control-plane:NoSchedule"},
			without: []string{"--cluster-init"},
			files:   []string{K3sAgentTokenPath},
			service: "k3s",
		},
		{
			name: "k3s single node",
			node: func() Node {
				n := node(K3s, RoleControlPlane)
				n.Init, n.SingleNode, n.PKI = true, true, p
				setK3sTokens(t, p, &n)
				return n
			},
			block:   func(c *cloudconfig.Config) *cloudconfig.Distribution { return c.K3s },
			args:    []string{"--cluster-init"},
			without: []string{"--node-taint=node-role.kubernetes.io/control-plane:NoSchedule"},
			service: "k3s",
		},
		{
			name:    "k3s agent",
			node:    func() Node { n := node(K3s, RoleWorker); setK3sTokens(t, p, &n); return n },
			block:   func(c *cloudconfig.Config) *cloudconfig.Distribution { return c.K3sAgent },
			args:    []string{"--server=https://api.demo.example.com:6443", "--token-file=/etc/rancher/k3s/token", "--node-taint=node.cluster.x-k8s.io/uninitialized:NoSchedule"},
			without: []string{"--agent-token-file=/etc/rancher/k3s/agent-token"},
			files:   []string{K3sTokenPath},
			absent:  []string{K3sAgentTokenPath},
			service: "k3s-agent",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustRender(t, tc.node())
			blocks := 0
			for _, b := range []*cloudconfig.Distribution{c.K0s, c.K0sWorker, c.K3s, c.K3sAgent} {
				if b != nil {
					blocks++
				}
			}
			d := tc.block(c)
			if blocks != 1 || d == nil || !d.Enabled {
				t.Fatalf("want exactly the one enabled block, got %d", blocks)
			}
			for _, a := range tc.args {
				if !slices.Contains(d.Args, a) {
					t.Errorf("missing arg %q in %v", a, d.Args)
				}
			}
			for _, a := range tc.without {
				if slices.Contains(d.Args, a) {
					t.Errorf("unexpected arg %q in %v", a, d.Args)
				}
			}
			files := allFiles(c)
			for _, f := range tc.files {
				if _, ok := files[f]; !ok {
					t.Errorf("missing file %s", f)
				}
			}
			for _, f := range tc.absent {
				if _, ok := files[f]; ok {
					t.Errorf("unexpected file %s", f)
				}
			}
			if got := ServiceName(tc.node().Distribution, tc.node().Role); got != tc.service {
				t.Errorf("service %s", got)
			}
			unit := files[BootstrapUnitPath].Content
			if !strings.Contains(unit, "After="+tc.service+".service\n") {
				t.Errorf("unit not ordered after %s:\n%s", tc.service, unit)
			}
			dropIn := files["/etc/systemd/system/"+tc.service+".service.d/10-kairos-capi-preflight.conf"]
			if !strings.Contains(dropIn.Content, "ExecStartPre=/bin/sh "+PreflightScript) {
				t.Errorf("no preflight drop-in for %s", tc.service)
			}
			script := files[BootstrapScript].Content
			wait := strings.Index(script, "until systemctl is-active --quiet "+tc.service+" ")
			sentinel := strings.Index(script, "> "+SentinelPath)
			if wait < 0 || sentinel < wait {
				t.Errorf("the sentinel is not written after waiting for %s:\n%s", tc.service, script)
			}
			// Nothing a Kairos node would hand to another role mechanism.
			data, err := c.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{"\np2p:", "\nkubevip:", "\ncluster:", "--single"} {
				if bytes.Contains(data, []byte(key)) {
					t.Errorf("document contains %q", key)
				}
			}
		})
	}
}

// TestStagesOrder pins the stage plan: files in boot, pre-commands then the
// sentinel unit in network (which runs before the Kairos agent starts the
// distribution), both skipped on the installer and in recovery, and the boot
// assessment's upgrade step after an upgrade.
func TestStagesOrder(t *testing.T) {
	p := fixturePKI(t)
	c := mustRender(t, k0sInitControlPlane(t, p))
	boot, network := c.Stages[cloudconfig.StageBoot], c.Stages[cloudconfig.StageNetwork]
	if !slices.Equal(c.Stages.StageNames(), []string{"boot.before", cloudconfig.StageBoot, cloudconfig.StageNetwork, cloudconfig.StageAfterUpgrade}) || len(boot) != 1 || len(network) != 3 {
		t.Fatalf("stages %v", c.Stages.StageNames())
	}
	if before := c.Stages["boot.before"]; len(before) != 1 || before[0].Name != stepAssessArm {
		t.Fatalf("boot.before %+v", before)
	}
	if boot[0].Name != stepFiles || network[0].Name != stepPre || network[1].Name != stepBootstrap || network[2].Name != stepAssessVerify {
		t.Fatalf("steps %q %q %q %q", boot[0].Name, network[0].Name, network[1].Name, network[2].Name)
	}
	for _, s := range network {
		if !strings.Contains(s.If, "/run/cos/live_mode") || !strings.Contains(s.If, "/run/cos/recovery_mode") {
			t.Errorf("%s runs on the installer or in recovery: %q", s.Name, s.If)
		}
	}
	if !strings.Contains(network[0].If, "! -e "+PreCommandsMarker) || !strings.Contains(network[0].Commands[0], "&& touch "+PreCommandsMarker) {
		t.Errorf("pre-commands do not run once: %+v", network[0])
	}
	if !slices.Contains(network[1].Commands, "systemctl start --no-block "+BootstrapUnit) {
		t.Errorf("the unit is started blocking: %v", network[1].Commands)
	}
	files := allFiles(c)
	pre := files[PreCommandsScript].Content
	if !strings.Contains(pre, "set -e\nmodprobe br_netfilter\nsysctl -w net.ipv4.ip_forward=1\n") {
		t.Errorf("pre-commands script:\n%s", pre)
	}
	preflight := files[PreflightScript].Content
	if !strings.Contains(preflight, "want=v1.31.2\n") || !strings.Contains(preflight, "k0s version") || !strings.Contains(preflight, PreCommandsMarker) {
		t.Errorf("preflight script:\n%s", preflight)
	}
	bootstrap := files[BootstrapScript].Content
	post := strings.Index(bootstrap, PostCommandsScript)
	if post < strings.Index(bootstrap, "until ") || post > strings.Index(bootstrap, "> "+SentinelPath) {
		t.Errorf("post-commands are not run between readiness and the sentinel:\n%s", bootstrap)
	}
	if !strings.HasPrefix(bootstrap, "#!/bin/sh\n") || !strings.Contains(bootstrap, "/bin/sh "+PreflightScript+" || exit 1\n") {
		t.Errorf("bootstrap script:\n%s", bootstrap)
	}
	// Without pre/post commands there is no script, no marker check.
	n := node(K0s, RoleControlPlane)
	n.Init, n.PKI = true, p
	c = mustRender(t, n)
	files = allFiles(c)
	if _, ok := files[PreCommandsScript]; ok {
		t.Error("pre-commands script without pre-commands")
	}
	if strings.Contains(files[PreflightScript].Content, PreCommandsMarker) || strings.Contains(files[BootstrapScript].Content, PostCommandsScript) {
		t.Error("marker checks without commands")
	}
	if len(c.Stages[cloudconfig.StageNetwork]) != 2 {
		t.Error("pre-commands step without pre-commands")
	}
}

func TestVersionCheck(t *testing.T) {
	p := fixturePKI(t)
	for _, tc := range []struct {
		d       Distribution
		version string
		want    []string
	}{
		{K0s, "v1.31.2", []string{"want=v1.31.2\n", "installed=$(k0s version", `"${installed%%+*}" != "$want"`}},
		{K0s, "1.30.0", []string{"want=v1.30.0\n"}},
		{K0s, "v1.31.2+k0s.1", []string{"want=v1.31.2+k0s.1\n", `"$installed" != "$want"`}},
		{K3s, "v1.31.2+k3s1", []string{"want=v1.31.2+k3s1\n", "installed=$(k3s --version", `"$installed" != "$want"`}},
	} {
		n := node(tc.d, RoleWorker)
		n.KubernetesVersion = tc.version
		if tc.d == K0s {
			n.JoinToken = k0sToken(t, p, token.K0sWorkerToken)
		} else {
			setK3sTokens(t, p, &n)
		}
		script := allFiles(mustRender(t, n))[PreflightScript].Content
		for _, w := range tc.want {
			if !strings.Contains(script, w) {
				t.Errorf("%s %s: missing %q in\n%s", tc.d, tc.version, w, script)
			}
		}
	}
}

// yipTemplate renders s the way yip does: text/template against system facts
// (sprig functions are irrelevant here: escaped text only uses constants).
func yipTemplate(t *testing.T, s string) string {
	t.Helper()
	tmpl, err := template.New("t").Parse(s)
	if err != nil {
		t.Fatalf("yip would fail to render %q: %v", s, err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, map[string]any{"Values": map[string]any{"image": "SUBSTITUTED"}, "MachineID": "SUBSTITUTED"}); err != nil {
		t.Fatalf("yip would fail to render %q: %v", s, err)
	}
	return b.String()
}

func TestEscapeTemplates(t *testing.T) {
	for _, s := range []string{
		"", "plain", "{{ .MachineID }}", "{{{", "{{{{ x }}}}", "a{{b", "}}", "{{- trim -}}", `{{"{{"}}`, "x {{ y }} z {{", "{{\n}}",
	} {
		esc := EscapeTemplates(s)
		if got := yipTemplate(t, esc); got != s {
			t.Errorf("%q escaped to %q renders as %q", s, esc, got)
		}
	}
}

// TestNodeWritesExactBytes renders content with template syntax and checks
// that, after yip's templating, the node writes and runs exactly what was
// given.
func TestNodeWritesExactBytes(t *testing.T) {
	p := fixturePKI(t)
	n := node(K3s, RoleControlPlane)
	n.Init, n.PKI = true, p
	setK3sTokens(t, p, &n)
	n.Files = []File{{Path: "/etc/x.tmpl", Content: "a: {{ .Values.image }}\nb: '{{{{ x }}}}'\n"}}
	n.Manifests = []Manifest{{Name: "helm", Content: "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: x\nspec:\n  valuesContent: |\n    image: {{ .Values.image }}\n"}}
	n.PreCommands = []string{"echo {{ .MachineID }} > /run/pre"}
	n.PostCommands = []string{"echo '{{ x }}'"}
	n.Config = "node-label:\n  - tmpl={{ .MachineID }}\n"
	data, err := Document(n)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudconfig.Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	files := allFiles(c)
	for path, want := range map[string]string{
		"/etc/x.tmpl": n.Files[0].Content,
		K3sManifestDir + "/" + K3sManifestPrefix + "helm.yaml": n.Manifests[0].Content,
		K3sUserConfigPath: n.Config,
	} {
		if got := yipTemplate(t, files[path].Content); got != want {
			t.Errorf("%s: the node would write %q, want %q", path, got, want)
		}
	}
	if got := yipTemplate(t, files[PreCommandsScript].Content); !strings.Contains(got, "\necho {{ .MachineID }} > /run/pre\n") {
		t.Errorf("pre-commands: %q", got)
	}
	if got := yipTemplate(t, files[PostCommandsScript].Content); !strings.Contains(got, "\necho '{{ x }}'\n") {
		t.Errorf("post-commands: %q", got)
	}
	for _, steps := range c.Stages {
		for _, s := range steps {
			for _, cmd := range append(s.Commands, s.If) {
				if got := yipTemplate(t, cmd); got != cmd {
					t.Errorf("command %q is altered by templating", cmd)
				}
			}
			for _, f := range s.Files {
				yipTemplate(t, f.Content) // every content must at least render
			}
		}
	}
	// HostnamePrefix is the one deliberate template.
	n.HostnamePrefix = "cp-"
	c = mustRender(t, n)
	if c.Hostname != "cp-{{ trunc 8 .MachineID }}" {
		t.Errorf("hostname %q", c.Hostname)
	}
}

func TestSecretsArePrivate(t *testing.T) {
	p := fixturePKI(t)
	for _, tc := range goldenCases() {
		c := mustRender(t, tc.node(t, p))
		for path, f := range allFiles(c) {
			secret := strings.Contains(f.Content, "PRIVATE KEY") || strings.HasSuffix(path, "/token") ||
				strings.Contains(path, "/manifests/") || strings.HasSuffix(path, "commands.sh")
			if secret && f.Permissions != 0o600 && f.Permissions != 0o700 {
				t.Errorf("%s: %s has mode %s", tc.name, path, f.Permissions)
			}
			if f.Permissions&0o002 != 0 {
				t.Errorf("%s: %s is world-writable", tc.name, path)
			}
		}
	}
}

func TestUsersInstallFiles(t *testing.T) {
	p := fixturePKI(t)
	n := node(K0s, RoleWorker)
	n.JoinToken = k0sToken(t, p, token.K0sWorkerToken)
	n.Users = append(n.Users, User{Name: "nopass", SSHAuthorizedKeys: []string{"github:x"}})
	n.Install = &Install{Auto: true, Device: "auto", Reboot: true}
	n.Files = []File{
		{Path: "/etc/a", Content: "a"},
		{Path: "/etc/b", Content: "b", Owner: "kairos:admin", Permissions: 0o644},
		{Path: "/etc/c", Content: "c", Owner: "1000:1001", Permissions: 0o640},
		{Path: "/etc/d", Content: "d", Owner: "root:root"},
	}
	c := mustRender(t, n)
	if c.Users[0].LockPasswd || c.Users[0].Passwd == "" || !reflect.DeepEqual(c.Users[0].Groups, []string{"admin", "wheel"}) {
		t.Errorf("user 0 %+v", c.Users[0])
	}
	if !c.Users[1].LockPasswd || c.Users[1].Passwd != "" {
		t.Errorf("a user without password must be locked: %+v", c.Users[1])
	}
	if *c.Install != (cloudconfig.Install{Auto: true, Device: "auto", Reboot: true}) {
		t.Errorf("install %+v", c.Install)
	}
	boot := c.Stages[cloudconfig.StageBoot]
	if len(boot) != 2 || boot[1].Name != stepUserFiles {
		t.Fatalf("user files step missing: %+v", boot)
	}
	want := []cloudconfig.File{
		{Path: "/etc/a", Permissions: 0o600, Content: "a"},
		{Path: "/etc/b", Permissions: 0o644, OwnerString: "kairos:admin", Content: "b"},
		{Path: "/etc/c", Permissions: 0o640, Owner: 1000, Group: 1001, Content: "c"},
		{Path: "/etc/d", Permissions: 0o600, Content: "d"},
	}
	if !reflect.DeepEqual(boot[1].Files, want) {
		t.Errorf("user files\n got %+v\nwant %+v", boot[1].Files, want)
	}
	n.Install = nil
	if mustRender(t, n).Install != nil {
		t.Error("install rendered for an installed image")
	}
}

func TestK0sClusterConfig(t *testing.T) {
	p := fixturePKI(t)
	n := node(K0s, RoleControlPlane)
	n.Init, n.PKI = true, p
	n.Endpoint = Endpoint{Host: "10.0.0.10", Port: 443}
	n.Network.APIServerPort = 443
	n.Config = "apiVersion: k0s.k0sproject.io/v1beta1\nkind: ClusterConfig\nmetadata:\n  name: k0s\nspec:\n  api:\n    sans: [extra.example.com]\n  network:\n    provider: calico\n"
	conf := allFiles(mustRender(t, n))[K0sConfigPath].Content
	var got map[string]any
	if err := yaml.Unmarshal([]byte(conf), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "k0s.k0sproject.io/v1beta1",
		"kind":       "ClusterConfig",
		"metadata":   map[string]any{"name": "demo"},
		"spec": map[string]any{
			"api":     map[string]any{"externalAddress": "10.0.0.10", "port": 443, "sans": []any{"10.0.0.10", "extra.example.com"}},
			"network": map[string]any{"provider": "calico"},
			"storage": map[string]any{"etcd": map[string]any{"extraArgs": map[string]any{"listen-client-urls": "https://0.0.0.0:2379"}}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\n%s", got, conf)
	}
	for cfg, wantErr := range map[string]string{
		"spec:\n  api:\n    port: 6443\n":         `Config: spec.api.port: is set from the Cluster's spec.clusterNetwork.apiServerPort (the endpoint port when unset): remove it here`,
		"spec:\n  api:\n    externalAddress: x\n": `Config: spec.api.externalAddress: is set from the Cluster's spec.controlPlaneEndpoint: remove it here`,
		"spec:\n  api: []\n":                      `Config: spec.api: must be a mapping, not a list`,
		"spec:\n  storage:\n    etcd:\n      extraArgs:\n        listen-client-urls: https://127.0.0.1:2379\n": `Config: spec.storage.etcd.extraArgs.listen-client-urls: is set from kairos-capi`,
		"spec:\n  telemetry: []\n":                `Config: spec.telemetry: must be a mapping, not a list`,
		"apiVersion: k0s.k0sproject.io/v1beta2\n": "apiVersion k0s.k0sproject.io/v1beta2 is not k0s.k0sproject.io/v1beta1",
		"kind: Cluster\n":                         "kind Cluster is not ClusterConfig",
		"metadata:\n  name: other\n":              "metadata.name other is not the cluster name demo",
		"- not\n- a map\n":                        "Config: not a YAML map",
	} {
		n.Config = cfg
		_, err := Render(n)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%q: got %v, want %q", cfg, err, wantErr)
		}
		if fes := FieldErrors(err); len(fes) == 0 || fes[0].Field != "Config" {
			t.Errorf("%q: the error does not name Config: %#v", cfg, fes)
		}
	}
}

func TestK3sUserConfig(t *testing.T) {
	p := fixturePKI(t)
	n := node(K3s, RoleWorker)
	setK3sTokens(t, p, &n)
	n.Config = "node-label:\n  - a=b\n"
	if got := allFiles(mustRender(t, n))[K3sUserConfigPath]; got.Content != n.Config || got.Permissions != 0o600 {
		t.Fatalf("config file %+v", got)
	}
	for _, cfg := range []string{"server: https://other:6443\n", "token: x\n", "token-file: /x\n", "- a\n"} {
		n.Config = cfg
		if _, err := Render(n); err == nil {
			t.Errorf("%q accepted", cfg)
		}
	}
	n.Role, n.PKI = RoleControlPlane, p
	setK3sTokens(t, p, &n)
	n.Config = "cluster-init: true\n"
	if _, err := Render(n); err == nil || !strings.Contains(err.Error(), `Config: cluster-init: is managed by kairos-capi`) {
		t.Errorf("cluster-init: %v", err)
	}
}

func TestValidation(t *testing.T) {
	p := fixturePKI(t)
	k0sWorker := func() Node { n := node(K0s, RoleWorker); n.JoinToken = k0sToken(t, p, token.K0sWorkerToken); return n }
	k0sInit := func() Node { n := node(K0s, RoleControlPlane); n.Init, n.PKI = true, p; return n }
	k3sAgent := func() Node { n := node(K3s, RoleWorker); setK3sTokens(t, p, &n); return n }
	k3sJoin := func() Node { n := node(K3s, RoleControlPlane); n.PKI = p; setK3sTokens(t, p, &n); return n }
	otherPKI := *p
	otherPKI.ClusterCA = p.EtcdCA
	cases := []struct {
		name   string
		mutate func() Node
		want   string
	}{
		{"no distribution", func() Node { n := k0sWorker(); n.Distribution = ""; return n }, "Distribution: required"},
		{"unknown distribution", func() Node { n := k0sWorker(); n.Distribution = "rke2"; return n }, `unknown distribution "rke2"`},
		{"no role", func() Node { n := k0sWorker(); n.Role = ""; return n }, "Role: required"},
		{"unknown role", func() Node { n := k0sWorker(); n.Role = "etcd"; return n }, `unknown role "etcd"`},
		{"missing version", func() Node { n := k0sWorker(); n.KubernetesVersion = ""; return n }, "KubernetesVersion: required"},
		{"bad version", func() Node { n := k0sWorker(); n.KubernetesVersion = "latest"; return n }, `KubernetesVersion: "latest" is not a version`},
		{"shell in version", func() Node { n := k0sWorker(); n.KubernetesVersion = "v1.2.3;rm -rf /"; return n }, "KubernetesVersion"},
		{"missing cluster name", func() Node { n := k0sWorker(); n.ClusterName = ""; return n }, "ClusterName: required"},
		{"bad cluster name", func() Node { n := k0sWorker(); n.ClusterName = "Demo_1"; return n }, "ClusterName"},
		{"missing endpoint", func() Node { n := k0sWorker(); n.Endpoint = Endpoint{}; return n }, "Endpoint.Host: required"},
		{"missing port", func() Node { n := k0sWorker(); n.Endpoint.Port = 0; return n }, "Endpoint.Port: 0 is not a TCP port"},
		{"bad host", func() Node { n := k0sWorker(); n.Endpoint.Host = "api example"; return n }, "Endpoint.Host"},
		{"hostname and prefix", func() Node { n := k0sWorker(); n.Hostname, n.HostnamePrefix = "a", "b-"; return n }, "not both"},
		{"bad hostname", func() Node { n := k0sWorker(); n.Hostname = "Node_1"; return n }, "Hostname"},
		{"templated hostname", func() Node { n := k0sWorker(); n.Hostname = "n-{{ .MachineID }}"; return n }, "Hostname"},
		{"bad prefix", func() Node { n := k0sWorker(); n.HostnamePrefix = "-x"; return n }, "HostnamePrefix"},
		{"long prefix", func() Node { n := k0sWorker(); n.HostnamePrefix = strings.Repeat("a", 56); return n }, "HostnamePrefix"},
		{"no users", func() Node { n := k0sWorker(); n.Users = nil; return n }, "Users: at least one user is required"},
		{"bad user name", func() Node { n := k0sWorker(); n.Users[0].Name = "Kairos"; return n }, "Users[0].Name"},
		{"duplicate user", func() Node { n := k0sWorker(); n.Users = append(n.Users, n.Users[0]); return n }, `Users[1].Name: "kairos" is also Users[0]`},
		{"comma group", func() Node { n := k0sWorker(); n.Users[0].Groups = []string{"admin,wheel"}; return n }, "Users[0].Groups[0]"},
		{"multi-line key", func() Node { n := k0sWorker(); n.Users[0].SSHAuthorizedKeys = []string{"a\nb"}; return n }, "Users[0].SSHAuthorizedKeys[0]"},
		{"reboot and poweroff", func() Node { n := k0sWorker(); n.Install = &Install{Reboot: true, Poweroff: true}; return n }, "Install: Reboot and Poweroff are exclusive"},
		{"bad device", func() Node { n := k0sWorker(); n.Install = &Install{Device: "sda"}; return n }, "Install.Device"},
		{"relative file", func() Node { n := k0sWorker(); n.Files = []File{{Path: "etc/x"}}; return n }, "Files[0].Path"},
		{"unclean file", func() Node { n := k0sWorker(); n.Files = []File{{Path: "/etc/../x"}}; return n }, "is not clean"},
		{"duplicate file", func() Node { n := k0sWorker(); n.Files = []File{{Path: "/x"}, {Path: "/x"}}; return n }, `Files[1].Path: "/x" is also Files[0]`},
		{"sentinel file", func() Node { n := k0sWorker(); n.Files = []File{{Path: SentinelPath}}; return n }, "bootstrap sentinel"},
		{"generated file", func() Node { n := k0sWorker(); n.Files = []File{{Path: K0sTokenPath}}; return n }, `Files[0].Path: "/etc/k0s/token" is written by the renderer`},
		{"boot assessment script", func() Node { n := k0sWorker(); n.Files = []File{{Path: BootAssessmentScript}}; return n }, `Files[0].Path: "` + BootAssessmentScript + `" is written by the renderer`},
		{"bad mode", func() Node { n := k0sWorker(); n.Files = []File{{Path: "/x", Permissions: 0o10000}}; return n }, "Files[0].Permissions"},
		{"bad owner", func() Node { n := k0sWorker(); n.Files = []File{{Path: "/x", Owner: "root"}}; return n }, "Files[0].Owner"},
		{"mixed owner", func() Node { n := k0sWorker(); n.Files = []File{{Path: "/x", Owner: "root:1000"}}; return n }, "Files[0].Owner"},
		{"invalid UTF-8", func() Node { n := k0sWorker(); n.Files = []File{{Path: "/x", Content: "\xff"}}; return n }, "Files[0].Content: is not valid UTF-8"},
		{"empty pre-command", func() Node { n := k0sWorker(); n.PreCommands = []string{" "}; return n }, "PreCommands[0]: empty command"},
		{"empty post-command", func() Node { n := k0sWorker(); n.PostCommands = []string{""}; return n }, "PostCommands[0]: empty command"},
		{"bad arg", func() Node { n := k0sWorker(); n.Args = []string{"a\nb"}; return n }, "Args[0]"},
		{"bad env", func() Node { n := k0sWorker(); n.Env = map[string]string{"A-B": "x"}; return n }, "Env"},
		{"managed env", func() Node { n := k3sAgent(); n.Env = map[string]string{"K3S_TOKEN": "x"}; return n }, "Env.K3S_TOKEN: k3s reads it as --token, which is managed by kairos-capi: "},
		{"server env on agent", func() Node { n := k3sAgent(); n.Env = map[string]string{"K3S_DATA_DIR": "/x"}; return n }, "Env.K3S_DATA_DIR: k3s reads it as --data-dir, which is managed by kairos-capi"},
		{"worker init", func() Node { n := k0sWorker(); n.Init = true; return n }, "Init: only control-plane"},
		{"worker single node", func() Node { n := k0sWorker(); n.SingleNode = true; return n }, "SingleNode"},
		{"worker manifests", func() Node { n := k0sWorker(); n.Manifests = []Manifest{{Name: "a", Content: "x"}}; return n }, "Manifests: only control-plane"},
		{"worker PKI", func() Node { n := k0sWorker(); n.PKI = p; return n }, "PKI: only control-plane"},
		{"k0s worker config", func() Node { n := k0sWorker(); n.Config = "a: b"; return n }, "Config: k0s workers take no ClusterConfig"},
		{"control plane without PKI", func() Node { n := k0sInit(); n.PKI = nil; return n }, "PKI: required on control-plane nodes"},
		{"incomplete PKI", func() Node { n := k0sInit(); bad := *p; bad.EtcdCA.Key = nil; n.PKI = &bad; return n }, "PKI.EtcdCA.Key"},
		{"SA cert is not a public key", func() Node {
			n := k0sInit()
			bad := *p
			bad.ServiceAccount.Cert = p.ClusterCA.Cert
			n.PKI = &bad
			return n
		}, "PKI.ServiceAccount.Cert"},
		{"bad manifest name", func() Node { n := k0sInit(); n.Manifests = []Manifest{{Name: "a/b", Content: "x"}}; return n }, "Manifests[0].Name"},
		{"empty manifest", func() Node { n := k0sInit(); n.Manifests = []Manifest{{Name: "a"}}; return n }, "Manifests[0].Content: empty"},
		{"duplicate manifest", func() Node {
			n := k0sInit()
			n.Manifests = []Manifest{{Name: "a", Content: "x"}, {Name: "a", Content: "y"}}
			return n
		}, `Manifests[1].Name: "a" is also Manifests[0]`},
		{"k0s init with token", func() Node { n := k0sInit(); n.JoinToken = k0sToken(t, p, token.K0sControllerToken); return n }, "takes no join token"},
		{"k0s join without token", func() Node { n := k0sInit(); n.Init = false; return n }, "JoinToken: required to join a k0s cluster (a controller token)"},
		{"k0s worker without token", func() Node { n := k0sWorker(); n.JoinToken = ""; return n }, "JoinToken: required to join a k0s cluster (a worker token)"},
		{"k0s worker with controller token", func() Node { n := k0sWorker(); n.JoinToken = k0sToken(t, p, token.K0sControllerToken); return n }, "is a k0s controller token but a worker token is needed"},
		{"k0s controller with worker token", func() Node {
			n := k0sInit()
			n.Init, n.JoinToken = false, k0sToken(t, p, token.K0sWorkerToken)
			return n
		}, "is a k0s worker token but a controller token is needed"},
		{"k0s controller token for another CA", func() Node {
			n := k0sInit()
			n.Init, n.JoinToken, n.PKI = false, k0sToken(t, p, token.K0sControllerToken), &otherPKI
			return n
		}, "its CA is not PKI.ClusterCA"},
		{"k0s junk token", func() Node { n := k0sWorker(); n.JoinToken = "junk"; return n }, "not a k0s join token"},
		{"k3s without token", func() Node { n := k3sAgent(); n.JoinToken = ""; return n }, "JoinToken: required: a k3s token K10<ca hash>::node:<password>"},
		{"k3s insecure token", func() Node { n := k3sAgent(); n.JoinToken = "secret"; return n }, "not in the secure format"},
		{"k3s token for another CA", func() Node { n := k3sJoin(); n.PKI = &otherPKI; return n }, "but PKI.ClusterCA hashes to"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.mutate()
			_, err := Render(n)
			if err == nil {
				t.Fatal("expected an error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v\nwant it to contain %q", err, tc.want)
			}
			if verr := n.Validate(); verr == nil && !strings.Contains(tc.want, "written by the renderer") {
				t.Fatal("Validate accepted what Render refused")
			}
			if _, derr := Document(n); derr == nil {
				t.Fatal("Document accepted it")
			}
		})
	}
	// Several problems are reported together.
	n := k0sWorker()
	n.ClusterName, n.Endpoint.Host = "", ""
	err := n.Validate()
	if err == nil || !strings.Contains(err.Error(), "ClusterName") || !strings.Contains(err.Error(), "Endpoint.Host") {
		t.Fatalf("got %v", err)
	}
	// Secrets do not leak into errors.
	n = k3sAgent()
	n.JoinToken = "K10" + strings.Repeat("z", 64) + "::server:supersecret"
	if err := n.Validate(); err == nil || strings.Contains(err.Error(), "supersecret") {
		t.Fatalf("got %v", err)
	}
}

// TestEveryFieldIsUsed changes each Node field in turn and checks that the
// document changes: no field may be accepted and ignored.
func TestEveryFieldIsUsed(t *testing.T) {
	p := fixturePKI(t)
	base := func(d Distribution, r Role) Node {
		n := node(d, r)
		switch {
		case d == K0s && r == RoleControlPlane:
			n.PKI, n.JoinToken = p, k0sToken(t, p, token.K0sControllerToken)
		case d == K0s:
			n.JoinToken = k0sToken(t, p, token.K0sWorkerToken)
		case r == RoleControlPlane:
			n.PKI = p
			setK3sTokens(t, p, &n)
		default:
			setK3sTokens(t, p, &n)
		}
		return n
	}
	otherCA := *p
	otherCA.FrontProxyCA = p.EtcdCA
	mutations := map[string]func(n *Node){
		"Distribution": func(n *Node) { *n = base(K3s, n.Role) },
		"Role":         func(n *Node) { *n = base(n.Distribution, RoleWorker) },
		"Init": func(n *Node) {
			n.Init = true
			n.JoinToken = map[Distribution]string{K0s: "", K3s: n.JoinToken}[n.Distribution]
		},
		"SingleNode":        func(n *Node) { n.SingleNode = true },
		"KubernetesVersion": func(n *Node) { n.KubernetesVersion = "v1.32.0" },
		"ClusterName":       func(n *Node) { n.ClusterName = "other" },
		"Endpoint":          func(n *Node) { n.Endpoint.Host = "api2.demo.example.com" },
		"Network":           func(n *Node) { n.Network.ServiceDomain = "cluster.example" },
		"Hostname":          func(n *Node) { n.Hostname = "h1" },
		"Image":             func(n *Node) { n.Image = "registry.local/edge/kairos:custom" },
		"HostnamePrefix":    func(n *Node) { n.HostnamePrefix = "h-" },
		"Users":             func(n *Node) { n.Users[0].Groups = []string{"other"} },
		"Install":           func(n *Node) { n.Install = &Install{Auto: true, Reboot: true} },
		"Files":             func(n *Node) { n.Files = []File{{Path: "/etc/x", Content: "x"}} },
		"PreCommands":       func(n *Node) { n.PreCommands = []string{"true"} },
		"PostCommands":      func(n *Node) { n.PostCommands = []string{"true"} },
		"Manifests": func(n *Node) {
			n.Manifests = []Manifest{{Name: "m", Content: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n"}}
		},
		"PKI": func(n *Node) { n.PKI = &otherCA },
		"JoinToken": func(n *Node) {
			n.JoinToken = map[Distribution]string{K0s: k0sToken(t, p, token.K0sControllerToken), K3s: strings.Replace(n.JoinToken, fixtureK3sPassword, "ffffffffffffffffffffffffffffffff", 1)}[n.Distribution]
			if n.Distribution == K0s {
				// A different bootstrap token.
				url, _ := token.K0sJoinURL(token.K0sControllerToken, "api.demo.example.com", 6443)
				n.JoinToken, _ = token.NewK0sJoinToken(token.K0sControllerToken, url, p.ClusterCA.Cert, token.BootstrapToken{ID: "zzzzzz", Secret: "zzzzzzzzzzzzzzzz"})
			}
		},
		"AgentToken": func(n *Node) {
			if n.Distribution == K3s {
				n.AgentToken = strings.Replace(n.AgentToken, fixtureK3sAgentPassword, "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", 1)
			} else {
				n.Distribution, n.JoinToken = K3s, "" // k0s takes no agent token
				setK3sTokens(t, p, n)
			}
		},
		"ExternalProviderID": func(n *Node) {
			if n.Distribution == K0s {
				// k0s registers no provider ID either way: only k3s servers change.
				n.Distribution, n.JoinToken = K3s, ""
				setK3sTokens(t, p, n)
			}
			n.ExternalProviderID = true
		},
		"VIP": func(n *Node) {
			n.Endpoint.Host = "192.0.2.10"
			n.VIP = &VIP{Address: "192.0.2.10"}
		},
		"EtcdSnapshots": func(n *Node) { n.EtcdSnapshots = fixtureEtcdSnapshots(p) },
		"Args":          func(n *Node) { n.Args = []string{"--debug"} },
		"Env":           func(n *Node) { n.Env = map[string]string{"A": "b"} },
		"Config": func(n *Node) {
			n.Config = map[Distribution]string{K0s: "spec:\n  telemetry:\n    enabled: false\n", K3s: "x: 1\n"}[n.Distribution]
		},
	}
	typ := reflect.TypeOf(Node{})
	for i := range typ.NumField() {
		if _, ok := mutations[typ.Field(i).Name]; !ok {
			t.Errorf("Node.%s has no mutation in this test", typ.Field(i).Name)
		}
	}
	for _, d := range []Distribution{K0s, K3s} {
		for name, mutate := range mutations {
			if name == "Distribution" && d == K3s {
				continue
			}
			t.Run(string(d)+"/"+name, func(t *testing.T) {
				n := base(d, RoleControlPlane)
				before, err := Document(n)
				if err != nil {
					t.Fatal(err)
				}
				mutate(&n)
				after, err := Document(n)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Equal(before, after) {
					t.Fatalf("changing %s does not change the document", name)
				}
			})
		}
	}
}

func TestDocumentFragments(t *testing.T) {
	p := fixturePKI(t)
	n := node(K3s, RoleWorker)
	setK3sTokens(t, p, &n)
	out, err := Document(n, merge.Fragment{Name: "dup", Content: []byte("write_files:\n  - path: " + K3sTokenPath + "\n")})
	if err == nil || err.Error() != `Fragments[0]: file "/etc/rancher/k3s/token" is written by both "generated" and fragment "dup"` {
		t.Fatalf("got %v\n%s", err, out)
	}
	_, err = Document(n, merge.Fragment{Name: "host", Content: []byte("hostname: other\n")}, merge.Fragment{Name: "host2", Content: []byte("hostname: other\n")})
	if err == nil || err.Error() != `Fragments[1]: key "hostname" is set by both fragment "host" and fragment "host2"` {
		t.Fatalf("got %v", err)
	}
}

func TestRenderDoesNotAliasInput(t *testing.T) {
	p := fixturePKI(t)
	n := node(K0s, RoleWorker)
	n.JoinToken = k0sToken(t, p, token.K0sWorkerToken)
	n.Args = make([]string, 1, 8)
	n.Args[0] = "--debug"
	n.Env = map[string]string{"A": "1"}
	c := mustRender(t, n)
	n.Users[0].Groups[0] = "changed"
	n.Env["A"] = "2"
	if c.Users[0].Groups[0] == "changed" || c.K0sWorker.Env["A"] != "1" {
		t.Fatal("the document shares memory with the Node")
	}
	c2 := mustRender(t, n)
	c2.K0sWorker.Args[0] = "x"
	if n.Args[0] != "--debug" {
		t.Fatal("the document writes into Node.Args")
	}
}

// TestImageStep: a node given an image upgrades to it in the network stage, before the steps
// that lead to the distribution (pre-commands, the bootstrap unit), only until its first
// bootstrap; the distribution's preflight refuses to start it on another image; the script is
// valid sh; a reference that is not an image is refused.
func TestImageStep(t *testing.T) {
	p := fixturePKI(t)
	n := node(K3s, RoleWorker)
	setK3sTokens(t, p, &n)
	n.PreCommands = []string{"true"}
	n.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv1.31.2-k3s1"
	cfg, err := Render(n)
	if err != nil {
		t.Fatal(err)
	}
	network := cfg.Stages["network"]
	if len(network) != 4 || network[0].Name != stepImage || network[1].Name != stepPre || network[2].Name != stepBootstrap || network[3].Name != stepAssessVerify {
		t.Fatalf("network stage = %+v, want the image step first", network)
	}
	if !strings.Contains(network[0].If, "[ ! -e "+BootstrapDoneMarker+" ]") || !strings.Contains(network[0].If, "live_mode") {
		t.Errorf("image step condition %q: must run on installed systems before the first bootstrap only", network[0].If)
	}
	if len(network[0].Commands) != 1 || network[0].Commands[0] != "/bin/sh "+ImageScript+" upgrade" {
		t.Errorf("image step commands = %q", network[0].Commands)
	}
	files := map[string]string{}
	for _, f := range cfg.Stages["boot"][0].Files {
		files[f.Path] = f.Content
	}
	script := files[ImageScript]
	for _, want := range []string{
		"image=" + n.Image + "\n",
		"release=v3.5.0-k3sv1.31.2+k3s1\n",
		`kairos-agent upgrade --source "oci:$image"`,
		"reboot\n",
		"[ -e " + BootstrapDoneMarker + " ] && exit 0",
	} {
		if !strings.Contains(script, want) {
			t.Errorf("image script lacks %q:\n%s", want, script)
		}
	}
	if !strings.Contains(files[PreflightScript], "/bin/sh "+ImageScript+" check || exit 1") {
		t.Errorf("preflight does not check the image:\n%s", files[PreflightScript])
	}
	if out, err := exec.Command("sh", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("image script is not valid sh: %v %s", err, out)
	}

	// No image: no step, no script, no check.
	n.Image = ""
	cfg, err = Render(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Stages["network"]) != 3 {
		t.Errorf("network stage without an image = %+v", cfg.Stages["network"])
	}

	n.Image = "quay.io/kairos/ubuntu:v1; reboot"
	_, err = Render(n)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "Image" {
		t.Fatalf("err = %v, want a FieldError on Image", err)
	}
}
