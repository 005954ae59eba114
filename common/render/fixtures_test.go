package render

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kairos-capi/kairos-capi/common/merge"
	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/token"
)

var update = flag.Bool("update", false, "rewrite the golden files (and create the test PKI if it is missing)")

const pkiDir = "testdata/pki"

// fixturePKI loads the test PKI from testdata, so goldens are byte-stable.
// With -update it is generated once when missing.
func fixturePKI(tb testing.TB) *PKI {
	tb.Helper()
	names := []string{"ca", "etcd-ca", "front-proxy-ca", "sa"}
	pairs := make([]pki.KeyPair, len(names))
	for i, name := range names {
		crt, errC := os.ReadFile(filepath.Join(pkiDir, name+".crt"))
		key, errK := os.ReadFile(filepath.Join(pkiDir, name+".key"))
		if errC != nil || errK != nil {
			if !*update {
				tb.Fatalf("test PKI missing in %s: run go test ./render -update", pkiDir)
			}
			return generateFixturePKI(tb)
		}
		pairs[i] = pki.KeyPair{Cert: crt, Key: key}
	}
	return &PKI{ClusterCA: pairs[0], EtcdCA: pairs[1], FrontProxyCA: pairs[2], ServiceAccount: pairs[3]}
}

func generateFixturePKI(tb testing.TB) *PKI {
	tb.Helper()
	mk := func(cn string) pki.KeyPair {
		kp, err := pki.NewCA(cn, 100*365*24*time.Hour)
		if err != nil {
			tb.Fatal(err)
		}
		return *kp
	}
	sa, err := pki.NewServiceAccountKeyPair()
	if err != nil {
		tb.Fatal(err)
	}
	p := &PKI{ClusterCA: mk("kubernetes"), EtcdCA: mk("etcd-ca"), FrontProxyCA: mk("front-proxy-ca"), ServiceAccount: *sa}
	if err := os.MkdirAll(pkiDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	for name, kp := range map[string]pki.KeyPair{"ca": p.ClusterCA, "etcd-ca": p.EtcdCA, "front-proxy-ca": p.FrontProxyCA, "sa": p.ServiceAccount} {
		if err := os.WriteFile(filepath.Join(pkiDir, name+".crt"), kp.Cert, 0o644); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkiDir, name+".key"), kp.Key, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return p
}

var (
	fixtureWorkerBootstrapToken     = token.BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}
	fixtureControllerBootstrapToken = token.BootstrapToken{ID: "ghijkl", Secret: "fedcba9876543210"}
)

const fixtureK3sPassword = "00112233445566778899aabbccddeeff"

func k0sToken(tb testing.TB, p *PKI, role token.K0sTokenRole) string {
	tb.Helper()
	t := fixtureWorkerBootstrapToken
	if role == token.K0sControllerToken {
		t = fixtureControllerBootstrapToken
	}
	url, err := token.K0sJoinURL(role, "api.demo.example.com", 6443)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := token.NewK0sJoinToken(role, url, p.ClusterCA.Cert, t)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func k3sToken(tb testing.TB, p *PKI) string {
	tb.Helper()
	hash, err := token.K3sCAHash(p.ClusterCA.Cert)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := token.FormatK3sToken(hash, token.K3sServerUser, fixtureK3sPassword)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

const fixtureK3sAgentPassword = "ffeeddccbbaa99887766554433221100"

func k3sAgentToken(tb testing.TB, p *PKI) string {
	tb.Helper()
	hash, err := token.K3sCAHash(p.ClusterCA.Cert)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := token.FormatK3sToken(hash, token.K3sAgentUser, fixtureK3sAgentPassword)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// setK3sTokens gives a k3s node the tokens of its role: servers the server
// token and the agent token, agents the agent token only.
func setK3sTokens(tb testing.TB, p *PKI, n *Node) {
	tb.Helper()
	if n.Role == RoleControlPlane {
		n.JoinToken, n.AgentToken = k3sToken(tb, p), k3sAgentToken(tb, p)
		return
	}
	n.JoinToken = k3sAgentToken(tb, p)
}

func baseUsers() []User {
	return []User{{
		Name:              "kairos",
		Password:          "$6$rounds=4096$salt$0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ab",
		Groups:            []string{"admin", "wheel"},
		SSHAuthorizedKeys: []string{"github:kairos-capi", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTestsOnly0000000000000000000 ops@example.com"},
	}}
}

func node(d Distribution, r Role) Node {
	return Node{
		Distribution:      d,
		Role:              r,
		KubernetesVersion: "v1.31.2",
		ClusterName:       "demo",
		Endpoint:          Endpoint{Host: "api.demo.example.com", Port: 6443},
		Users:             baseUsers(),
	}
}

type goldenCase struct {
	name      string
	node      func(tb testing.TB, p *PKI) Node
	fragments []merge.Fragment
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{name: "k0s-init-control-plane", node: k0sInitControlPlane},
		{name: "k0s-join-control-plane", node: func(tb testing.TB, p *PKI) Node {
			n := node(K0s, RoleControlPlane)
			n.Hostname = "demo-cp-2"
			n.PKI = p
			n.JoinToken = k0sToken(tb, p, token.K0sControllerToken)
			n.Config = "spec:\n  network:\n    provider: calico\n"
			return n
		}},
		{name: "k0s-single-node", node: func(tb testing.TB, p *PKI) Node {
			n := node(K0s, RoleControlPlane)
			n.Init = true
			n.SingleNode = true
			n.Endpoint = Endpoint{Host: "192.168.122.10", Port: 6443}
			n.HostnamePrefix = "solo-"
			n.PKI = p
			return n
		}},
		{name: "k0s-worker", node: func(tb testing.TB, p *PKI) Node {
			n := node(K0s, RoleWorker)
			n.HostnamePrefix = "demo-md-"
			n.Install = &Install{Auto: true, Device: "/dev/vda", Poweroff: true}
			n.JoinToken = k0sToken(tb, p, token.K0sWorkerToken)
			n.Args = []string{"--labels=node.kubernetes.io/pool=default"}
			return n
		}},
		{name: "k3s-init-control-plane", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleControlPlane)
			n.KubernetesVersion = "v1.31.2+k3s1"
			n.Init = true
			n.HostnamePrefix = "demo-cp-"
			n.Install = &Install{Auto: true, Device: "auto", Reboot: true}
			n.PKI = p
			setK3sTokens(tb, p, &n)
			n.PreCommands = []string{"modprobe br_netfilter"}
			n.PostCommands = []string{"k3s kubectl get nodes"}
			n.Manifests = []Manifest{{Name: "namespace", Content: "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: platform\n"}}
			n.Config = "disable:\n  - traefik\nwrite-kubeconfig-mode: \"0600\"\n"
			n.Env = map[string]string{"K3S_DEBUG": "false"}
			return n
		}},
		{name: "k3s-join-control-plane", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleControlPlane)
			n.Hostname = "demo-cp-2"
			n.PKI = p
			setK3sTokens(tb, p, &n)
			return n
		}},
		{name: "k3s-single-node", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleControlPlane)
			n.Init = true
			n.SingleNode = true
			n.Endpoint = Endpoint{Host: "192.168.122.20", Port: 6443}
			n.PKI = p
			setK3sTokens(tb, p, &n)
			return n
		}},
		{name: "k0s-etcd-snapshots", node: func(tb testing.TB, p *PKI) Node {
			n := node(K0s, RoleControlPlane)
			n.Init = true
			n.SingleNode = true
			n.Hostname = "site-a-cp-x7k2p"
			n.PKI = p
			n.EtcdSnapshots = fixtureEtcdSnapshots(p)
			return n
		}},
		{name: "k3s-etcd-snapshots", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleControlPlane)
			n.Init = true
			n.SingleNode = true
			n.Hostname = "site-a-cp-x7k2p"
			n.PKI = p
			setK3sTokens(tb, p, &n)
			n.EtcdSnapshots = fixtureEtcdSnapshots(p)
			return n
		}},
		{name: "k0s-etcd-restore", node: func(tb testing.TB, p *PKI) Node {
			n := node(K0s, RoleControlPlane)
			n.Init = true
			n.SingleNode = true
			n.Hostname = "site-a-cp-b9m4q"
			n.PKI = p
			n.EtcdSnapshots = fixtureEtcdSnapshots(p)
			n.EtcdSnapshots.Restore = true
			return n
		}},
		{name: "k3s-etcd-restore", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleControlPlane)
			n.Init = true
			n.SingleNode = true
			n.Hostname = "site-a-cp-b9m4q"
			n.PKI = p
			setK3sTokens(tb, p, &n)
			n.EtcdSnapshots = fixtureEtcdSnapshots(p)
			n.EtcdSnapshots.Restore = true
			return n
		}},
		{name: "k3s-worker", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleWorker)
			n.HostnamePrefix = "demo-md-"
			setK3sTokens(tb, p, &n)
			n.Config = "node-label:\n  - pool=default\n"
			return n
		}},
		{name: "k3s-join-control-plane-image", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleControlPlane)
			n.Hostname = "demo-cp-3"
			n.PKI = p
			setK3sTokens(tb, p, &n)
			n.PreCommands = []string{"modprobe br_netfilter"}
			n.Image = "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3sv" + strings.TrimPrefix(n.KubernetesVersion, "v") + "-k3s1"
			return n
		}},
		{name: "k0s-worker-image-unversioned", node: func(tb testing.TB, p *PKI) Node {
			n := node(K0s, RoleWorker)
			n.HostnamePrefix = "demo-md-"
			n.JoinToken = k0sToken(tb, p, token.K0sWorkerToken)
			n.Image = "registry.local:5000/edge/kairos-k0s@sha256:" + strings.Repeat("ab", 32)
			return n
		}},
		{name: "k0s-network", node: func(tb testing.TB, p *PKI) Node {
			// A load balancer on 443 in front of API servers on 6443, dual
			// stack, a custom service domain (k0s >= v1.34.1 takes the
			// endpoint as externalAddress host:port).
			n := node(K0s, RoleControlPlane)
			n.KubernetesVersion = "v1.34.1+k0s"
			n.Init = true
			n.Hostname = "demo-cp-1"
			n.PKI = p
			n.Endpoint.Port = 443
			n.Network = fixtureNetwork()
			return n
		}},
		{name: "k3s-network", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleControlPlane)
			n.Init = true
			n.Hostname = "demo-cp-1"
			n.PKI = p
			setK3sTokens(tb, p, &n)
			n.Endpoint.Port = 443
			n.Network = fixtureNetwork()
			return n
		}},
		{name: "k0s-vip", node: func(tb testing.TB, p *PKI) Node {
			// A joining controller of a cluster whose endpoint is a virtual
			// IP the controllers hold (keepalived), on a named interface.
			n := node(K0s, RoleControlPlane)
			n.Hostname = "demo-cp-2"
			n.PKI = p
			n.JoinToken = k0sToken(tb, p, token.K0sControllerToken)
			n.Endpoint.Host = "192.0.2.10"
			n.VIP = &VIP{Address: "192.0.2.10", PrefixLength: 24, Interface: "eth0", VirtualRouterID: 77}
			return n
		}},
		{name: "k3s-vip", node: func(tb testing.TB, p *PKI) Node {
			// The first server of a cluster whose endpoint is a virtual IP
			// kube-vip holds.
			n := node(K3s, RoleControlPlane)
			n.Init = true
			n.Hostname = "demo-cp-1"
			n.PKI = p
			setK3sTokens(tb, p, &n)
			n.Endpoint.Host = "192.0.2.10"
			n.VIP = &VIP{Address: "192.0.2.10"}
			return n
		}},
		{
			name: "k0s-worker-fragments",
			node: func(tb testing.TB, p *PKI) Node {
				n := node(K0s, RoleWorker)
				n.Hostname = "demo-md-7"
				n.JoinToken = k0sToken(tb, p, token.K0sWorkerToken)
				return n
			},
			fragments: []merge.Fragment{
				{Name: "network", Position: merge.Prepend, Content: []byte(`#cloud-config
# Per-host network: a bond, before anything else runs in boot.
stages:
  boot:
    - name: bond0
      files:
        - path: /etc/systemd/network/10-bond0.netdev
          permissions: 0644
          owner: 0
          group: 0
          content: |
            [NetDev]
            Name=bond0
            Kind=bond
users:
  - name: ops
    groups:
      - admin
    ssh_authorized_keys:
      - github:ops-team
`)},
				{Name: "site", Position: merge.Append, Content: []byte(`#cloud-config
write_files:
  - path: /etc/motd
    permissions: "0644"
    owner: root:root
    content: |
      Managed by Cluster API. Ask the ops team before changing this host.
stages:
  network:
    - name: site ntp
      commands:
        - timedatectl set-ntp true
`)},
			},
		},
		{name: "k3s-templates-escaped", node: func(tb testing.TB, p *PKI) Node {
			n := node(K3s, RoleWorker)
			n.Hostname = "demo-md-8"
			setK3sTokens(tb, p, &n)
			n.Files = []File{
				{Path: "/etc/helm/values.yaml", Content: "image: {{ .Values.image }}\nliteral: '{{\"{{\"}}'\n", Owner: "kairos:kairos", Permissions: 0o640},
				{Path: "/opt/tools/run.sh", Content: "#!/bin/sh\necho \"{{ hello }}\"\n", Permissions: 0o755},
			}
			n.PreCommands = []string{"echo '{{ .MachineID }} stays literal' > /run/pre.txt"}
			n.PostCommands = []string{"printf '%s\\n' '{{{{ weird }}}}' >> /run/post.txt"}
			return n
		}},
	}
}

func fixtureNetwork() Network {
	return Network{
		APIServerPort: 6443,
		PodCIDRs:      []string{"10.244.0.0/16", "fd00:10:244::/56"},
		ServiceCIDRs:  []string{"10.96.0.0/12", "fd00:10:96::/112"},
		ServiceDomain: "cluster.example",
	}
}

func k0sInitControlPlane(tb testing.TB, p *PKI) Node {
	n := node(K0s, RoleControlPlane)
	n.Init = true
	n.HostnamePrefix = "demo-cp-"
	n.Install = &Install{Auto: true, Device: "auto", Reboot: true}
	n.PKI = p
	n.PreCommands = []string{"modprobe br_netfilter", "sysctl -w net.ipv4.ip_forward=1"}
	n.PostCommands = []string{"k0s kubectl get nodes"}
	secret, err := token.K0sBootstrapTokenManifest(token.K0sWorkerToken, fixtureWorkerBootstrapToken, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		tb.Fatal(err)
	}
	n.Manifests = []Manifest{{Name: "worker-bootstrap-token", Content: string(secret)}}
	n.Args = []string{"--debug"}
	n.Env = map[string]string{"HTTP_PROXY": "http://proxy.example.com:3128", "NO_PROXY": "10.0.0.0/8,.svc"}
	n.Config = "spec:\n  network:\n    provider: calico\n  telemetry:\n    enabled: false\n"
	return n
}

// fixtureEtcdSnapshots is a store with a private CA (the fixture cluster CA stands in for it)
// and a secret key with the characters curl's config quotes.
func fixtureEtcdSnapshots(p *PKI) *EtcdSnapshots {
	return &EtcdSnapshots{
		Schedule:        "0 */6 * * *",
		Retention:       7,
		Endpoint:        "s3.example.com:9000",
		Bucket:          "site-backups",
		Folder:          "edge/eu/default/demo",
		Region:          "eu-west-1",
		CABundle:        string(p.ClusterCA.Cert),
		AccessKeyID:     "AKIAFIXTURE0000",
		SecretAccessKey: `fixture"secret\key/+0000`,
	}
}
