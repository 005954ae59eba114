package render

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kairos-capi/kairos-capi/common/merge"
	"github.com/kairos-capi/kairos-capi/common/token"
)

// TestRefusedInputs lists inputs that rendered before the node-semantics
// checks existed and that a real node would misread, ignore or refuse. Each
// must be refused with a FieldError naming the field (and the key path
// inside YAML content).
func TestRefusedInputs(t *testing.T) {
	p := fixturePKI(t)
	k0sWorker := func() Node { n := node(K0s, RoleWorker); n.JoinToken = k0sToken(t, p, token.K0sWorkerToken); return n }
	k0sInit := func() Node { n := node(K0s, RoleControlPlane); n.Init, n.PKI = true, p; return n }
	k3sAgent := func() Node { n := node(K3s, RoleWorker); setK3sTokens(t, p, &n); return n }
	k3sServer := func() Node {
		n := node(K3s, RoleControlPlane)
		n.Init, n.PKI = true, p
		setK3sTokens(t, p, &n)
		return n
	}
	frag := func(content string) []merge.Fragment {
		return []merge.Fragment{{Name: "ok", Content: []byte("stages:\n  network:\n    - commands: [true]\n")}, {Name: "f", Content: []byte(content)}}
	}
	tests := []struct {
		name      string
		node      func() Node
		fragments []merge.Fragment
		field     string
		path      string
		msg       string
	}{
		// Fragments, read as yip reads them.
		{"quoted stage file permissions", k0sWorker, frag("stages:\n  boot:\n    - files:\n        - path: /etc/x\n          permissions: \"0644\"\n"),
			"Fragments[1]", "stages.boot[0].files[0].permissions", "drops every stage"},
		{"groups as a string", k0sWorker, frag("users:\n  - name: ops\n    groups: \"admin, users\"\n"),
			"Fragments[1]", "users[0].groups", "must be a YAML list"},
		{"redefines the generated user", k0sWorker, frag("users:\n  - name: kairos\n    passwd: x\n"),
			"Fragments[1]", "users[0]", `user "kairos" is already defined by the generated document`},
		{"redefines the generated user in a stage", k0sWorker, frag("stages:\n  boot:\n    - users:\n        kairos:\n          passwd: x\n"),
			"Fragments[1]", "stages.boot[0].users.kairos", `user "kairos" is already defined`},
		{"user of an earlier fragment", k0sWorker, []merge.Fragment{{Name: "a", Content: []byte("users:\n  - name: ops\n")}, {Name: "b", Content: []byte("users:\n  - name: ops\n")}},
			"Fragments[1]", "users[0]", `already defined by the fragment "a"`},
		{"p2p", k0sWorker, frag("p2p:\n  network_token: x\n"), "Fragments[1]", "p2p", "negotiates node roles"},
		{"k0s block", k0sWorker, frag("k0s:\n  args: [--single]\n"), "Fragments[1]", "k0s", "the k0s block is generated"},
		{"install without spec install", k0sWorker, frag("install:\n  auto: true\n"), "Fragments[1]", "install", "an install without reboot"},
		{"unknown step key", k0sWorker, frag("stages:\n  boot:\n    - owner_string: a\n"), "Fragments[1]", "stages.boot[0].owner_string", "not a key yip knows"},
		{"invalid UTF-8", k0sWorker, frag("hostname: \xff\n"), "Fragments[1]", "", "invalid leading UTF-8 octet"},
		{"fragment file owner beyond 32 bits", k0sWorker, frag("stages:\n  boot:\n    - files:\n        - path: /etc/x\n          owner: 4294967296\n          permissions: 0600\n"),
			"Fragments[1]", "stages.boot[0].files[0].owner", "so yip's chown sets 0, not 4294967296"},
		{"fragment entity uid leading zero", k0sWorker, frag("stages:\n  boot:\n    - ensure_entities:\n        - path: /etc/passwd\n          entity: |\n            kind: user\n            username: ops\n            uid: 01000\n"),
			"Fragments[1]", "stages.boot[0].ensure_entities[0].entity.uid", "octal number 512"},
		{"fragment write_files numeric owner", k0sWorker, frag("write_files:\n  - path: /etc/x\n    owner: 1000:1000\n"),
			"Fragments[1]", "write_files[0].owner", `yip looks "1000" up as a user name`},
		// Files: what yip applies.
		{"file mode with setuid", func() Node {
			n := k0sWorker()
			n.Files = []File{{Path: "/opt/x", Content: "x", Permissions: 0o4755}}
			return n
		}, nil,
			"Files[0].Permissions", "", "it keeps only the permission bits 0777"},
		{"file owner beyond 32 bits", func() Node {
			n := k0sWorker()
			n.Files = []File{{Path: "/opt/x", Content: "x", Owner: "4294967296:0"}}
			return n
		}, nil,
			"Files[0].Owner", "", "numeric ids at most 4294967294"},

		// Managed flags, every spelling.
		{"--single", func() Node { n := k0sInit(); n.Args = []string{"--single"}; return n }, nil, "Args[0]", "", "--single is managed"},
		{"--token-file with a space", func() Node { n := k0sWorker(); n.Args = []string{"--token-file /x"}; return n }, nil, "Args[0]", "", "--token-file is managed"},
		{"k0s -c shorthand", func() Node { n := k0sInit(); n.Args = []string{"-c /etc/other.yaml"}; return n }, nil, "Args[0]", "", "--config is managed"},
		{"k0s -c with attached value", func() Node { n := k0sInit(); n.Args = []string{"-c/etc/other.yaml"}; return n }, nil, "Args[0]", "", "--config is managed"},
		{"k0s combined shorthands", func() Node { n := k0sInit(); n.Args = []string{"-dc", "/etc/other.yaml"}; return n }, nil, "Args[0]", "", "--config is managed"},
		{"k0s --data-dir=", func() Node { n := k0sWorker(); n.Args = []string{"--data-dir=/data"}; return n }, nil, "Args[0]", "", "--data-dir is managed"},
		{"k3s -t alias", func() Node { n := k3sAgent(); n.Args = []string{"-t", "secret"}; return n }, nil, "Args[0]", "", "--token is managed"},
		{"k3s single-dash long flag", func() Node { n := k3sAgent(); n.Args = []string{"-server=https://x:6443"}; return n }, nil, "Args[0]", "", "--server is managed"},
		{"k3s --agent-token on a server", func() Node { n := k3sServer(); n.Args = []string{"--agent-token=x"}; return n }, nil, "Args[0]", "", "--agent-token is managed"},
		{"k3s --https-listen-port", func() Node { n := k3sServer(); n.Args = []string{"--https-listen-port", "443"}; return n }, nil, "Args[0]", "", "--https-listen-port is managed"},
		{"k3s K3S_URL env", func() Node { n := k3sAgent(); n.Env = map[string]string{"K3S_URL": "https://x:6443"}; return n }, nil, "Env.K3S_URL", "", "--server"},
		{"k3s config token key", func() Node { n := k3sAgent(); n.Config = "token: x\n"; return n }, nil, "Config", "token", "is managed"},
		{"k3s cluster-cidr while the Cluster sets pods", func() Node {
			n := k3sServer()
			n.Network.PodCIDRs = []string{"10.244.0.0/16"}
			n.Args = []string{"--cluster-cidr=10.1.0.0/16"}
			return n
		}, nil, "Args[0]", "", "spec.clusterNetwork.pods.cidrBlocks"},

		// Flags of the other role.
		{"k3s --disable on an agent", func() Node { n := k3sAgent(); n.Args = []string{"--disable=traefik"}; return n }, nil, "Args[0]", "", "k3s agent refuses to start"},
		{"k3s etcd-s3 on an agent", func() Node { n := k3sAgent(); n.Args = []string{"--etcd-s3-bucket", "b"}; return n }, nil, "Args[0]", "", "k3s server flag"},
		{"k3s server key in an agent config", func() Node { n := k3sAgent(); n.Config = "disable:\n  - traefik\n"; return n }, nil, "Config", "disable", "k3s agent skips it"},
		{"k0s controller flag on a worker", func() Node { n := k0sWorker(); n.Args = []string{"--enable-metrics-scraper"}; return n }, nil, "Args[0]", "", "k0s worker refuses to start"},

		// Manifests are Kubernetes objects.
		{"manifest that is not YAML", func() Node { n := k0sInit(); n.Manifests = []Manifest{{Name: "m", Content: "a: [\n"}}; return n }, nil, "Manifests[0].Content", "documents[0]", "is not valid YAML"},
		{"manifest without kind", func() Node {
			n := k0sInit()
			n.Manifests = []Manifest{{Name: "m", Content: "apiVersion: v1\nmetadata:\n  name: x\n"}}
			return n
		}, nil, "Manifests[0].Content", "documents[0].kind", "required"},
		{"second manifest document without a name", func() Node {
			n := k0sInit()
			n.Manifests = []Manifest{{Name: "m", Content: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: Namespace\nmetadata: {}\n"}}
			return n
		}, nil, "Manifests[0].Content", "documents[1].metadata.name", "required"},

		// The k0s ClusterConfig, as strictly as k0s reads it.
		{"unknown ClusterConfig field", func() Node { n := k0sInit(); n.Config = "spec:\n  network:\n    podCIDRs: 10.0.0.0/16\n"; return n }, nil, "Config", "spec.network.podCIDRs", "is not a ClusterConfig field"},
		{"bad CIDR", func() Node { n := k0sInit(); n.Config = "spec:\n  network:\n    podCIDR: 10.0.0.0/33\n"; return n }, nil, "Config", "spec.network.podCIDR", "is not a CIDR"},
		{"quoted port", func() Node { n := k0sInit(); n.Config = "spec:\n  konnectivity:\n    agentPort: \"8132\"\n"; return n }, nil, "Config", "spec.konnectivity.agentPort", "must be a whole number"},
		{"unknown provider", func() Node { n := k0sInit(); n.Config = "spec:\n  network:\n    provider: flannel\n"; return n }, nil, "Config", "spec.network.provider", "is not one of"},
		{"network set by the Cluster", func() Node {
			n := k0sInit()
			n.Network.ServiceDomain = "cluster.example"
			n.Config = "spec:\n  network:\n    clusterDomain: other.example\n"
			return n
		}, nil, "Config", "spec.network.clusterDomain", "spec.clusterNetwork.serviceDomain"},

		// The Cluster's network.
		{"bad pod CIDR", func() Node { n := k3sServer(); n.Network.PodCIDRs = []string{"10.244.0.0"}; return n }, nil, "Network.PodCIDRs[0]", "", "is not a CIDR"},
		{"three service CIDRs", func() Node {
			n := k3sServer()
			n.Network.ServiceCIDRs = []string{"10.1.0.0/16", "10.2.0.0/16", "fd00::/108"}
			return n
		}, nil, "Network.ServiceCIDRs", "", "holds 3 CIDRs"},
		{"k0s dual-stack pods without services", func() Node { n := k0sInit(); n.Network.PodCIDRs = []string{"10.244.0.0/16", "fd00::/56"}; return n }, nil, "Network.ServiceCIDRs", "", "IPv6 service CIDR"},
		{"service domain", func() Node { n := k3sServer(); n.Network.ServiceDomain = "Cluster_Local"; return n }, nil, "Network.ServiceDomain", "", "not a lowercase DNS name"},
		{"k0s behind a port-translating load balancer before v1.34.1", func() Node {
			n := k0sInit()
			n.KubernetesVersion = "v1.33.5+k0s.0"
			n.Endpoint.Port = 443
			n.Network.APIServerPort = 6443
			return n
		}, nil, "Network.APIServerPort", "", "k0s before v1.34.1"},

		// Tokens: agents never hold the server token; servers accept agents.
		{"k3s agent with the server token", func() Node { n := k3sAgent(); n.JoinToken = k3sToken(t, p); return n }, nil, "JoinToken", "", "is the k3s server token: agents must not receive it"},
		{"k3s server without the agent token", func() Node { n := k3sServer(); n.AgentToken = ""; return n }, nil, "AgentToken", "", "required on k3s servers"},
		{"k3s server token as agent token", func() Node { n := k3sServer(); n.AgentToken = k3sToken(t, p); return n }, nil, "AgentToken", "", "is the k3s server token"},

		// Installation.
		{"install that neither reboots nor powers off", func() Node { n := k0sWorker(); n.Install = &Install{Auto: true}; return n }, nil, "Install.Reboot", "", "stays in the live installer"},

		// A Secret holds at most 1 MiB.
		{"2 MiB file", func() Node {
			n := k0sWorker()
			n.Files = []File{{Path: "/opt/small", Content: "x"}, {Path: "/opt/big", Content: strings.Repeat("a", 2<<20)}}
			return n
		}, nil, "Files[1].Content", "", "a Secret holds at most 1 MiB"},
		{"2 MiB fragment", k0sWorker, frag("write_files:\n  - path: /opt/big\n    content: " + strings.Repeat("a", 2<<20) + "\n"), "Fragments[1]", "", "a Secret holds at most 1 MiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Document(tc.node(), tc.fragments...)
			if err == nil {
				t.Fatal("rendered")
			}
			for _, fe := range FieldErrors(err) {
				if fe.Field == tc.field && fe.Path == tc.path && strings.Contains(fe.Err.Error(), tc.msg) {
					return
				}
			}
			t.Fatalf("no FieldError %s %q containing %q in:\n%v\n%#v", tc.field, tc.path, tc.msg, err, FieldErrors(err))
		})
	}
}

// TestAcceptedInputs are close relatives of the refused ones that must keep
// rendering.
func TestAcceptedInputs(t *testing.T) {
	p := fixturePKI(t)
	k0sInit := func() Node { n := node(K0s, RoleControlPlane); n.Init, n.PKI = true, p; return n }
	k3sAgent := func() Node { n := node(K3s, RoleWorker); setK3sTokens(t, p, &n); return n }
	k3sServer := func() Node {
		n := node(K3s, RoleControlPlane)
		n.Init, n.PKI = true, p
		setK3sTokens(t, p, &n)
		return n
	}
	tests := []struct {
		name      string
		node      Node
		fragments []merge.Fragment
	}{
		{"a flag value in its own item", func() Node { n := k0sInit(); n.Args = []string{"--labels", "single=x"}; return n }(), nil},
		{"k0s debug shorthand", func() Node { n := k0sInit(); n.Args = []string{"-d"}; return n }(), nil},
		{"k3s agent flags", func() Node {
			n := k3sAgent()
			n.Args = []string{"--node-label=a=b", "--kubelet-arg=max-pods=200"}
			return n
		}(), nil},
		{"k3s server flags on a server", func() Node { n := k3sServer(); n.Args = []string{"--disable=traefik"}; return n }(), nil},
		{"k3s cluster-cidr when the Cluster sets none", func() Node { n := k3sServer(); n.Args = []string{"--cluster-cidr=10.1.0.0/16"}; return n }(), nil},
		{"full ClusterConfig", func() Node {
			n := k0sInit()
			n.Config = "apiVersion: k0s.k0sproject.io/v1beta1\nkind: ClusterConfig\nmetadata:\n  name: k0s\nspec:\n  network:\n    provider: calico\n    calico:\n      mode: vxlan\n    kubeProxy:\n      mode: ipvs\n      ipvs:\n        syncPeriod: 30s\n  extensions:\n    helm:\n      charts:\n        - name: x\n          chartname: repo/x\n          namespace: default\n          timeout: 10m\n  workerProfiles:\n    - name: custom\n      values:\n        maxPods: 200\n  interval: 10s\n"
			return n
		}(), nil},
		{"a List manifest", func() Node {
			n := k0sInit()
			n.Manifests = []Manifest{{Name: "l", Content: "---\n# comment\napiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Namespace\n    metadata:\n      name: a\n"}}
			return n
		}(), nil},
		{"fragment adding a user and stages", k3sAgent(), []merge.Fragment{{Name: "f", Content: []byte("#cloud-config\nusers:\n  - name: ops\n    groups: [admin]\nstages:\n  boot:\n    - files:\n        - path: /etc/x\n          permissions: 0644\n          content: x\n")}}},
		{"k0s v1.34.1 behind a port-translating load balancer", func() Node {
			n := k0sInit()
			n.KubernetesVersion = "v1.34.1"
			n.Endpoint.Port, n.Network.APIServerPort = 443, 6443
			return n
		}(), nil},
		{"k3s behind a port-translating load balancer", func() Node { n := k3sServer(); n.Endpoint.Port, n.Network.APIServerPort = 443, 6443; return n }(), nil},
		{"k0s before v1.34.1 on an endpoint that reaches the API servers directly", func() Node {
			n := k0sInit()
			n.KubernetesVersion = "v1.31.2"
			n.Endpoint.Port = 7443
			return n
		}(), nil},
		{"install with the default reboot", func() Node { n := k0sInit(); n.Install = &Install{Auto: true, Reboot: true}; return n }(), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Document(tc.node, tc.fragments...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAPIServerPort checks where API servers listen and where nodes join:
// the Cluster's apiServerPort on the node, the endpoint for everyone else.
func TestAPIServerPort(t *testing.T) {
	p := fixturePKI(t)
	for _, tc := range []struct {
		name     string
		apiPort  int32
		endpoint int32
		version  string
		k0sAPI   string
		k0sExt   string
		k3sPort  string
	}{
		{"unset means the endpoint port", 0, 6443, "v1.31.2", "port: 6443", "externalAddress: api.demo.example.com\n", "--https-listen-port=6443"},
		{"unset with an endpoint on 7443", 0, 7443, "v1.31.2", "port: 7443", "externalAddress: api.demo.example.com\n", "--https-listen-port=7443"},
		{"6443 behind 443", 6443, 443, "v1.34.1", "port: 6443", "externalAddress: api.demo.example.com:443\n", "--https-listen-port=6443"},
		{"same port", 7443, 7443, "v1.31.2", "port: 7443", "externalAddress: api.demo.example.com\n", "--https-listen-port=7443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k0s := node(K0s, RoleControlPlane)
			k0s.Init, k0s.PKI, k0s.KubernetesVersion = true, p, tc.version
			k0s.Endpoint.Port, k0s.Network.APIServerPort = tc.endpoint, tc.apiPort
			conf := allFiles(mustRender(t, k0s))[K0sConfigPath].Content
			if !strings.Contains(conf, tc.k0sAPI) || !strings.Contains(conf, tc.k0sExt) {
				t.Errorf("k0s.yaml:\n%s", conf)
			}
			k3s := node(K3s, RoleControlPlane)
			k3s.PKI = p
			setK3sTokens(t, p, &k3s)
			k3s.Endpoint.Port, k3s.Network.APIServerPort = tc.endpoint, tc.apiPort
			args := strings.Join(mustRender(t, k3s).K3s.Args, " ")
			wantServer := "--server=https://api.demo.example.com:" + strconv.Itoa(int(tc.endpoint))
			if !strings.Contains(args, tc.k3sPort) || !strings.Contains(args, wantServer) {
				t.Errorf("k3s args %s, want %s and %s", args, tc.k3sPort, wantServer)
			}
		})
	}
}

// TestK0sJoiningControllerGetsNoCA pins why joining controllers get no
// ca.crt/ca.key: k0s before v1.29.13, v1.30.9 and v1.31.5 skipped the join
// when it found them and started a second etcd cluster.
func TestK0sJoiningControllerGetsNoCA(t *testing.T) {
	p := fixturePKI(t)
	n := node(K0s, RoleControlPlane)
	n.PKI = p
	n.JoinToken = k0sToken(t, p, token.K0sControllerToken)
	files := allFiles(mustRender(t, n))
	for _, f := range []string{K0sPKIDir + "/ca.crt", K0sPKIDir + "/ca.key"} {
		if _, ok := files[f]; ok {
			t.Errorf("%s is pre-seeded on a joining controller", f)
		}
	}
	for _, f := range []string{K0sPKIDir + "/etcd/ca.crt", K0sPKIDir + "/front-proxy-ca.key", K0sPKIDir + "/sa.key"} {
		if _, ok := files[f]; !ok {
			t.Errorf("%s is missing", f)
		}
	}
}

// TestPreflightPinsTheVersionUntilTheFirstBootstrap: later boots (after an
// in-place upgrade of the Kairos image) must not keep the distribution from
// starting.
func TestPreflightPinsTheVersionUntilTheFirstBootstrap(t *testing.T) {
	p := fixturePKI(t)
	n := k0sInitControlPlane(t, p)
	files := allFiles(mustRender(t, n))
	pre, boot := files[PreflightScript].Content, files[BootstrapScript].Content
	guard := strings.Index(pre, "if [ ! -e "+BootstrapDoneMarker+" ]; then\n")
	check := strings.Index(pre, "installed=$(k0s version")
	if guard < 0 || check < guard {
		t.Fatalf("the version check is not guarded by the bootstrap marker:\n%s", pre)
	}
	sentinel := strings.Index(boot, "> "+SentinelPath)
	marker := strings.Index(boot, "touch "+BootstrapDoneMarker)
	if marker < sentinel || sentinel < 0 {
		t.Fatalf("the marker is not written with the sentinel:\n%s", boot)
	}
}
