package simnode

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kairos-capi/kairos-capi/common/render"
)

// vipEndpoint is a cluster endpoint that is a virtual IP: no load balancer answers on it, only
// the control-plane node that holds the address, elected among the running nodes told to hold
// it (k0s' keepalived by VRRP, kube-vip by a Lease). While none runs, nothing listens on the
// endpoint. The holder's API server is the cluster's kube-apiserver, which listens elsewhere.
type vipEndpoint struct {
	addr    string // host:port of the endpoint
	backend string // host:port of the cluster's kube-apiserver
	log     logr.Logger

	mu         sync.Mutex
	candidates map[*Node]bool
	holder     *Node
	ln         net.Listener
	conns      map[net.Conn]bool
	closed     bool
}

func newVIPEndpoint(addr, backend string, log logr.Logger) *vipEndpoint {
	return &vipEndpoint{addr: addr, backend: backend, log: log, candidates: map[*Node]bool{}, conns: map[net.Conn]bool{}}
}

// join makes a running node that was told to hold the address a candidate.
func (v *vipEndpoint) join(n *Node) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.candidates[n] = true
	return v.elect()
}

// leave drops a node that stopped (deleted, powered off).
func (v *vipEndpoint) leave(n *Node) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.candidates[n] {
		return
	}
	delete(v.candidates, n)
	if err := v.elect(); err != nil {
		v.log.Error(err, "Moving the virtual IP", "endpoint", v.addr)
	}
}

// served tells whether some node holds the address.
func (v *vipEndpoint) served() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.holder != nil
}

// Holder returns the node holding the address, or nil.
func (v *vipEndpoint) Holder() *Node {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.holder
}

// elect keeps the holder while it runs, or moves the address to another candidate: the
// connections to the old holder break, as TCP connections do when an address moves to another
// machine. Without candidates nothing listens. Must be called with mu held.
func (v *vipEndpoint) elect() error {
	if v.holder != nil && v.candidates[v.holder] {
		return nil
	}
	for c := range v.conns {
		_ = c.Close()
	}
	v.conns = map[net.Conn]bool{}
	v.holder = nil
	if len(v.candidates) == 0 || v.closed {
		if v.ln != nil {
			_ = v.ln.Close()
			v.ln = nil
		}
		return nil
	}
	nodes := make([]*Node, 0, len(v.candidates))
	for n := range v.candidates {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name() < nodes[j].Name() })
	v.holder = nodes[0]
	v.log.Info("A node holds the virtual IP", "endpoint", v.addr, "node", v.holder.Name())
	if v.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", v.addr)
	if err != nil {
		return fmt.Errorf("listening on the virtual IP %s: %w", v.addr, err)
	}
	v.ln = ln
	go v.serve(ln)
	return nil
}

func (v *vipEndpoint) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		v.mu.Lock()
		if v.ln != ln || v.holder == nil {
			v.mu.Unlock()
			_ = c.Close()
			continue
		}
		v.conns[c] = true
		v.mu.Unlock()
		go func() {
			defer func() {
				v.mu.Lock()
				delete(v.conns, c)
				v.mu.Unlock()
			}()
			b, err := net.Dial("tcp", v.backend)
			if err != nil {
				_ = c.Close()
				return
			}
			pipe(c, b)
		}()
	}
}

func (v *vipEndpoint) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	v.candidates = map[*Node]bool{}
	_ = v.elect()
}

// holdsVIP tells whether the document makes the node hold host as a virtual IP, and refuses a
// configuration the distribution would refuse. k0s: a keepalived VRRP instance of
// spec.network.controlPlaneLoadBalancing with host among its virtualIPs, checked as k0s checks
// it (pkg/apis/k0s/v1beta1/cplb.go ValidateVRRPInstances: CIDRs, a password of 1-8 characters,
// a router ID of 0-255), and the endpoint reconciler disabled, which the k0s documentation
// requires with an external address ("Control plane load balancing"). k3s: a kube-vip DaemonSet
// in the server manifests that announces host for the control plane.
func (p *plan) holdsVIP(host string) (bool, error) {
	if p.role != render.RoleControlPlane {
		return false, nil
	}
	if p.distribution == render.K3s {
		return p.kubeVIPAnnounces(host)
	}
	path := p.flags.value("config")
	if path == "" {
		path = k0sConfigPath
	}
	raw, err := p.file(path)
	if err != nil {
		return false, err
	}
	var c struct {
		Spec struct {
			API struct {
				ExternalAddress string `yaml:"externalAddress"`
			} `yaml:"api"`
			Network struct {
				CPLB *struct {
					Enabled    bool   `yaml:"enabled"`
					Type       string `yaml:"type"`
					Keepalived struct {
						VRRPInstances []struct {
							VirtualIPs      []string `yaml:"virtualIPs"`
							AuthPass        string   `yaml:"authPass"`
							VirtualRouterID *int     `yaml:"virtualRouterID"`
						} `yaml:"vrrpInstances"`
					} `yaml:"keepalived"`
				} `yaml:"controlPlaneLoadBalancing"`
			} `yaml:"network"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		return false, refuse(ReasonBootstrapDataRefused, "%s is not a k0s ClusterConfig: %v", path, err)
	}
	lb := c.Spec.Network.CPLB
	if lb == nil || !lb.Enabled {
		return false, nil
	}
	if lb.Type != "Keepalived" {
		return false, refuse(ReasonBootstrapDataRefused, "%s: controlPlaneLoadBalancing.type %q: k0s only knows Keepalived", path, lb.Type)
	}
	holds := false
	for i, vi := range lb.Keepalived.VRRPInstances {
		if vi.AuthPass == "" || len(vi.AuthPass) > 8 {
			return false, refuse(ReasonBootstrapDataRefused, "%s: vrrpInstances[%d].authPass must be 1 to 8 characters", path, i)
		}
		if vi.VirtualRouterID != nil && (*vi.VirtualRouterID < 0 || *vi.VirtualRouterID > 255) {
			return false, refuse(ReasonBootstrapDataRefused, "%s: vrrpInstances[%d].virtualRouterID must be in the range of 1-255", path, i)
		}
		if len(vi.VirtualIPs) == 0 {
			return false, refuse(ReasonBootstrapDataRefused, "%s: vrrpInstances[%d]: VirtualIPs must be defined", path, i)
		}
		for _, cidr := range vi.VirtualIPs {
			ip, _, err := net.ParseCIDR(cidr)
			if err != nil {
				return false, refuse(ReasonBootstrapDataRefused, "%s: VirtualIPs must be a CIDR. Got: %s", path, cidr)
			}
			holds = holds || ip.Equal(net.ParseIP(host))
		}
	}
	if holds && c.Spec.API.ExternalAddress != "" && !containsString(p.flags.list("disable-components"), "endpoint-reconciler") {
		return false, refuse(ReasonBootstrapDataRefused, "control-plane load balancing with spec.api.externalAddress needs --disable-components=endpoint-reconciler")
	}
	return holds, nil
}

// kubeVIPAnnounces looks for kube-vip in the k3s server manifests: a DaemonSet whose container
// runs kube-vip's manager with the control plane enabled (cp_enable) and address host.
func (p *plan) kubeVIPAnnounces(host string) (bool, error) {
	for _, path := range manifestFiles(p) {
		objs, err := decodeManifest([]byte(p.files[path]))
		if err != nil {
			return false, refuse(ReasonBootstrapDataRefused, "manifest %s: %v", path, err)
		}
		for _, o := range objs {
			if o.GetKind() != "DaemonSet" {
				continue
			}
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, raw := range containers {
				c, _ := raw.(map[string]any)
				image, _ := c["image"].(string)
				if !strings.Contains(image, "kube-vip") {
					continue
				}
				env := map[string]string{}
				list, _ := c["env"].([]any)
				for _, e := range list {
					m, _ := e.(map[string]any)
					name, _ := m["name"].(string)
					value, _ := m["value"].(string)
					env[name] = value
				}
				if env["cp_enable"] != "true" || !net.ParseIP(env["address"]).Equal(net.ParseIP(host)) {
					continue
				}
				if port := env["port"]; port != "" {
					if _, err := strconv.Atoi(port); err != nil {
						return false, refuse(ReasonBootstrapDataRefused, "manifest %s: kube-vip port %q is not a port", path, port)
					}
				}
				return true, nil
			}
		}
	}
	return false, nil
}
