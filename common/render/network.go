package render

import (
	"fmt"
	"net"
	"strconv"

	"k8s.io/apimachinery/pkg/util/version"
)

// k0sExternalHostPortVersion is the first k0s release that accepts
// spec.api.externalAddress as host:port and then sends kube-proxy, the
// in-cluster "kubernetes" Endpoints and k0s' own kubeconfigs to that port
// instead of spec.api.port (k0s commit 4da84d23 "Allow apiserver
// ExternalAddress to be host:port", first tagged v1.34.1+k0s.0; see
// pkg/apis/k0s/v1beta1/api.go ExternalPort and
// pkg/component/controller/apiendpointreconciler.go). Older releases refuse
// a host:port there and use externalAddress:spec.api.port, which a load
// balancer listening on another port does not answer.
var k0sExternalHostPortVersion = version.MustParseSemantic("v1.34.1")

// cidrFamilies parses a Cluster API cidrBlocks list the way k0s and k3s
// take it: one CIDR, or one IPv4 and one IPv6 CIDR for dual stack. It
// returns the IPv4 and IPv6 CIDRs ("" when absent).
func cidrFamilies(p *problems, field string, blocks []string) (v4, v6 string) {
	if len(blocks) > 2 {
		p.add(field, "holds %d CIDRs: k0s and k3s take one, or one IPv4 and one IPv6 for dual stack", len(blocks))
		return "", ""
	}
	for i, b := range blocks {
		ip, _, err := net.ParseCIDR(b)
		if err != nil {
			p.add(fmt.Sprintf("%s[%d]", field, i), "%q is not a CIDR such as 10.244.0.0/16", b)
			continue
		}
		if ip.To4() != nil {
			if v4 != "" {
				p.add(fmt.Sprintf("%s[%d]", field, i), "a second IPv4 CIDR: dual stack takes one IPv4 and one IPv6 CIDR")
			}
			v4 = b
		} else {
			if v6 != "" {
				p.add(fmt.Sprintf("%s[%d]", field, i), "a second IPv6 CIDR: dual stack takes one IPv4 and one IPv6 CIDR")
			}
			v6 = b
		}
	}
	return v4, v6
}

func (n *Node) validateNetwork(p *problems) {
	nw := n.Network
	if nw.APIServerPort < 0 || nw.APIServerPort > 65535 {
		p.add("Network.APIServerPort", "%d is not a TCP port", nw.APIServerPort)
	}
	if nw.ServiceDomain != "" && !isDNSName(nw.ServiceDomain) {
		p.add("Network.ServiceDomain", "%q is not a lowercase DNS name", nw.ServiceDomain)
	}
	pod4, pod6 := cidrFamilies(p, "Network.PodCIDRs", nw.PodCIDRs)
	svc4, svc6 := cidrFamilies(p, "Network.ServiceCIDRs", nw.ServiceCIDRs)
	if n.Distribution != K0s {
		return
	}
	// k0s: podCIDR and serviceCIDR share one family, and dual stack needs
	// both IPv6 CIDRs (k0s pkg/apis/k0s/v1beta1/network.go Validate).
	podDual, svcDual := pod4 != "" && pod6 != "", svc4 != "" && svc6 != ""
	switch {
	case len(nw.PodCIDRs) > 0 && len(nw.ServiceCIDRs) > 0 && podDual != svcDual:
		p.add("Network.ServiceCIDRs", "k0s runs dual stack only with both pods and services dual stack (one IPv4 and one IPv6 CIDR each)")
	case podDual && len(nw.ServiceCIDRs) == 0:
		p.add("Network.ServiceCIDRs", "required with dual-stack pod CIDRs: k0s needs an IPv6 service CIDR too")
	case svcDual && len(nw.PodCIDRs) == 0:
		p.add("Network.PodCIDRs", "required with dual-stack service CIDRs: k0s needs an IPv6 pod CIDR too")
	case !podDual && !svcDual && ((pod4 != "" && svc6 != "") || (pod6 != "" && svc4 != "")):
		p.add("Network.ServiceCIDRs", "k0s needs the pod and the service CIDR in one address family")
	}
	if n.Role != RoleControlPlane {
		return
	}
	if n.apiServerPort() != n.Endpoint.Port && !atLeast(n.KubernetesVersion, k0sExternalHostPortVersion) {
		p.add("Network.APIServerPort", "the API servers listen on %d but the endpoint on %d: k0s before v1.34.1 sends kube-proxy and in-cluster clients to the endpoint host on port %d, which this load balancer does not answer; use k0s v1.34.1 or later, or make apiServerPort equal to the endpoint port",
			n.apiServerPort(), n.Endpoint.Port, n.apiServerPort())
	}
}

// k0sNetwork returns the network part of the generated ClusterConfig.
func (n *Node) k0sNetwork() map[string]any {
	nw := n.Network
	var p problems // validateNetwork reports the problems
	pod4, pod6 := cidrFamilies(&p, "", nw.PodCIDRs)
	svc4, svc6 := cidrFamilies(&p, "", nw.ServiceCIDRs)
	out := map[string]any{}
	first := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	if pod := first(pod4, pod6); pod != "" {
		out["podCIDR"] = pod
	}
	if svc := first(svc4, svc6); svc != "" {
		out["serviceCIDR"] = svc
	}
	if pod4 != "" && pod6 != "" {
		ds := map[string]any{"enabled": true, "IPv6podCIDR": pod6}
		if svc6 != "" {
			ds["IPv6serviceCIDR"] = svc6
		}
		out["dualStack"] = ds
	}
	if nw.ServiceDomain != "" {
		out["clusterDomain"] = nw.ServiceDomain
	}
	return out
}

// k0sExternalAddress is spec.api.externalAddress: the endpoint host, with
// the endpoint port when it differs from the port the API servers bind to
// (k0s v1.34.1 and later, see k0sExternalHostPortVersion).
func (n *Node) k0sExternalAddress() string {
	e := n.Endpoint
	if e.Port == n.apiServerPort() {
		return e.Host
	}
	return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
}

// k3sNetworkArgs are the k3s server flags for the Cluster's network. Agents
// take none: they get the cluster's CIDRs and domain from the server.
func (n *Node) k3sNetworkArgs() []string {
	var args []string
	join := func(blocks []string) string {
		s := ""
		for i, b := range blocks {
			if i > 0 {
				s += ","
			}
			s += b
		}
		return s
	}
	if len(n.Network.PodCIDRs) > 0 {
		args = append(args, "--cluster-cidr="+join(n.Network.PodCIDRs))
	}
	if len(n.Network.ServiceCIDRs) > 0 {
		args = append(args, "--service-cidr="+join(n.Network.ServiceCIDRs))
	}
	if n.Network.ServiceDomain != "" {
		args = append(args, "--cluster-domain="+n.Network.ServiceDomain)
	}
	return args
}
