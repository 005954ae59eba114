package render

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/token"
)

func vipNode(t *testing.T, d Distribution, address string) Node {
	t.Helper()
	p := fixturePKI(t)
	n := node(d, RoleControlPlane)
	n.Init, n.PKI = true, p
	if d == K3s {
		setK3sTokens(t, p, &n)
	}
	n.Endpoint.Host = address
	n.VIP = &VIP{Address: address}
	return n
}

// TestVIPRefused: every way a virtual IP cannot work is refused at the field that breaks it,
// with the fix in the message.
func TestVIPRefused(t *testing.T) {
	tests := []struct {
		name, field, msg string
		edit             func(n *Node)
		dist             Distribution
	}{
		{"DNS name", "VIP.Address", "not an IP address", func(n *Node) { n.VIP.Address = "api.example.com" }, K0s},
		{"unspecified", "VIP.Address", "cannot be announced", func(n *Node) { n.VIP.Address, n.Endpoint.Host = "0.0.0.0", "0.0.0.0" }, K3s},
		{"not the endpoint", "VIP.Address", "set the endpoint host (on the Cluster or its infrastructure cluster) to the virtual IP",
			func(n *Node) { n.Endpoint.Host = "192.0.2.11" }, K0s},
		{"endpoint is a DNS name", "VIP.Address", `is not the Cluster's spec.controlPlaneEndpoint.host "api.demo.example.com"`,
			func(n *Node) { n.Endpoint.Host = "api.demo.example.com" }, K3s},
		{"prefix longer than the family", "VIP.PrefixLength", "not a prefix length of 192.0.2.10 (1-32)", func(n *Node) { n.VIP.PrefixLength = 33 }, K0s},
		{"port translation", "Network.APIServerPort", "with a virtual IP both ports are the same", func(n *Node) { n.Network.APIServerPort = 6444 }, K0s},
		{"router ID out of range", "VIP.VirtualRouterID", "not a VRRP router ID", func(n *Node) { n.VIP.VirtualRouterID = 256 }, K0s},
		{"kube-vip image that is no image reference", "VIP.KubeVIPImage", "is not an image reference like ghcr.io/kube-vip/kube-vip:v1.0.4",
			func(n *Node) { n.VIP.KubeVIPImage = "ghcr.io/kube-vip/kube-vip:v1.0.4\n        command: [sh]" }, K3s},
		{"kube-vip image on k0s", "VIP.KubeVIPImage", "remove kubeVIPImage", func(n *Node) { n.VIP.KubeVIPImage = "example/kube-vip:v1" }, K0s},
		{"worker", "VIP", "only control-plane nodes hold the virtual IP", func(n *Node) {
			n.Role, n.Init, n.PKI, n.JoinToken = RoleWorker, false, nil, k0sToken(t, fixturePKI(t), token.K0sWorkerToken)
		}, K0s},
		{"k0s before control-plane load balancing", "VIP", "which k0s has from v1.30.0; v1.29.9 is older", func(n *Node) { n.KubernetesVersion = "v1.29.9" }, K0s},
		{"node-local load balancing next to the virtual IP", "Config", "k0s refuses node-local load balancing", func(n *Node) {
			n.Config = "spec:\n  network:\n    nodeLocalLoadBalancing:\n      enabled: true\n"
		}, K0s},
		{"user config sets load balancing too", "Config", "is set from spec.virtualIP", func(n *Node) {
			n.Config = "spec:\n  network:\n    controlPlaneLoadBalancing:\n      enabled: true\n"
		}, K0s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := vipNode(t, tt.dist, "192.0.2.10")
			tt.edit(&n)
			_, err := Document(n)
			if err == nil {
				t.Fatal("rendered")
			}
			for _, fe := range FieldErrors(err) {
				if fe.Field == tt.field && strings.Contains(fe.Error(), tt.msg) {
					return
				}
			}
			t.Errorf("want a problem at %s saying %q, got: %v", tt.field, tt.msg, err)
		})
	}
}

// TestVIPRendered: what each distribution is told, read back from the document.
func TestVIPRendered(t *testing.T) {
	t.Run("k0s keepalived", func(t *testing.T) {
		n := vipNode(t, K0s, "2001:db8::10")
		doc := mustDocument(t, n)
		cfg := fileOf(t, n, K0sConfigPath)
		var c struct {
			Spec struct {
				API struct {
					ExternalAddress string   `yaml:"externalAddress"`
					SANs            []string `yaml:"sans"`
				} `yaml:"api"`
				Network struct {
					CPLB struct {
						Enabled    bool   `yaml:"enabled"`
						Type       string `yaml:"type"`
						Keepalived struct {
							VRRP []struct {
								VirtualIPs []string `yaml:"virtualIPs"`
								AuthPass   string   `yaml:"authPass"`
							} `yaml:"vrrpInstances"`
						} `yaml:"keepalived"`
					} `yaml:"controlPlaneLoadBalancing"`
				} `yaml:"network"`
			} `yaml:"spec"`
		}
		if err := yaml.Unmarshal([]byte(cfg), &c); err != nil {
			t.Fatal(err)
		}
		lb := c.Spec.Network.CPLB
		if !lb.Enabled || lb.Type != "Keepalived" || len(lb.Keepalived.VRRP) != 1 {
			t.Fatalf("controlPlaneLoadBalancing %+v", lb)
		}
		vrrp := lb.Keepalived.VRRP[0]
		if len(vrrp.VirtualIPs) != 1 || vrrp.VirtualIPs[0] != "2001:db8::10/128" {
			t.Errorf("virtualIPs %v, want the address as a CIDR (k0s refuses a bare IP)", vrrp.VirtualIPs)
		}
		if l := len(vrrp.AuthPass); l == 0 || l > 8 {
			t.Errorf("authPass %q: k0s wants 1 to 8 characters", vrrp.AuthPass)
		}
		if c.Spec.API.ExternalAddress != "2001:db8::10" || len(c.Spec.API.SANs) != 1 || c.Spec.API.SANs[0] != "2001:db8::10" {
			t.Errorf("api %+v: the virtual IP must be the external address and a SAN", c.Spec.API)
		}
		if !strings.Contains(doc, "--disable-components=endpoint-reconciler") {
			t.Error("k0s requires the endpoint reconciler off with control-plane load balancing and an external address")
		}
		// Every controller of the cluster sends the same VRRP password.
		other := vipNode(t, K0s, "2001:db8::10")
		other.Init, other.JoinToken = false, k0sToken(t, other.PKI, token.K0sControllerToken)
		if !strings.Contains(fileOf(t, other, K0sConfigPath), "authPass: "+vrrp.AuthPass) {
			t.Error("a joining controller got another VRRP password")
		}
	})
	t.Run("k3s kube-vip", func(t *testing.T) {
		n := vipNode(t, K3s, "192.0.2.10")
		n.VIP.Interface = "ens192"
		doc := mustDocument(t, n)
		image, env := kubeVIPContainer(t, fileOf(t, n, K3sVIPManifest))
		if image != DefaultKubeVIPImage {
			t.Errorf("kube-vip image %q, want %q", image, DefaultKubeVIPImage)
		}
		for k, want := range map[string]string{"address": "192.0.2.10", "vip_subnet": "32", "vip_interface": "ens192", "port": "6443", "cp_enable": "true"} {
			if env[k] != want {
				t.Errorf("kube-vip env %s = %q, want %q", k, env[k], want)
			}
		}
		if !strings.Contains(doc, "--tls-san=192.0.2.10") {
			t.Error("the servers' certificate must carry the virtual IP")
		}
		n.VIP.KubeVIPImage = "registry.example.com/kube-vip:v1.0.4"
		if image, _ := kubeVIPContainer(t, fileOf(t, n, K3sVIPManifest)); image != "registry.example.com/kube-vip:v1.0.4" {
			t.Errorf("kubeVIPImage is not used: image %q", image)
		}
		// A router ID (one template for both distributions) is accepted and changes nothing.
		withID := n
		withID.VIP = &VIP{Address: n.VIP.Address, Interface: n.VIP.Interface, KubeVIPImage: n.VIP.KubeVIPImage, VirtualRouterID: 77}
		if a, b := mustDocument(t, n), mustDocument(t, withID); a != b {
			t.Error("virtualRouterID changed what a k3s server is told")
		}
	})
	t.Run("no VIP, no announcement", func(t *testing.T) {
		for _, d := range []Distribution{K0s, K3s} {
			n := vipNode(t, d, "192.0.2.10")
			n.VIP = nil
			doc := mustDocument(t, n)
			if strings.Contains(doc, "controlPlaneLoadBalancing") || strings.Contains(doc, "kube-vip") || strings.Contains(doc, "endpoint-reconciler") {
				t.Errorf("%s: a node without a virtual IP announces one", d)
			}
		}
	})
}

func mustDocument(t *testing.T, n Node) string {
	t.Helper()
	doc, err := Document(n)
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

func fileOf(t *testing.T, n Node, path string) string {
	t.Helper()
	f, ok := allFiles(mustRender(t, n))[path]
	if !ok {
		t.Fatalf("the document writes no %s", path)
	}
	return f.Content
}

// TestNodeLocalLoadBalancing: k0s refuses node-local load balancing next to an external address,
// which every generated ClusterConfig has, so a user ClusterConfig that enables it is refused at
// its key, with or without a virtual IP; one that leaves it disabled renders.
func TestNodeLocalLoadBalancing(t *testing.T) {
	n := node(K0s, RoleControlPlane)
	n.Init, n.PKI = true, fixturePKI(t)
	n.Config = "spec:\n  network:\n    nodeLocalLoadBalancing:\n      enabled: true\n      type: EnvoyProxy\n"
	_, err := Document(n)
	var found bool
	for _, fe := range FieldErrors(err) {
		found = found || fe.Field == "Config" && fe.Path == "spec.network.nodeLocalLoadBalancing.enabled" && strings.Contains(fe.Error(), "remove it")
	}
	if !found {
		t.Errorf("want a problem at Config spec.network.nodeLocalLoadBalancing.enabled, got: %v", err)
	}
	n.Config = "spec:\n  network:\n    nodeLocalLoadBalancing:\n      enabled: false\n"
	if _, err := Document(n); err != nil {
		t.Errorf("disabled node-local load balancing refused: %v", err)
	}
}

// kubeVIPContainer reads the kube-vip DaemonSet's container from the manifest the k3s servers
// apply: its image and environment.
func kubeVIPContainer(t *testing.T, manifest string) (string, map[string]string) {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(manifest))
	for {
		var o struct {
			Kind string
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Image string
							Env   []struct{ Name, Value string }
						}
					}
				}
			}
		}
		if err := dec.Decode(&o); err != nil {
			t.Fatalf("no kube-vip DaemonSet in the manifest (%v):\n%s", err, manifest)
		}
		if o.Kind != "DaemonSet" {
			continue
		}
		if len(o.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("kube-vip DaemonSet with %d containers", len(o.Spec.Template.Spec.Containers))
		}
		c := o.Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		return c.Image, env
	}
}
