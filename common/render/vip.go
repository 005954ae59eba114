package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kairos-capi/kairos-capi/common/internal/yamlenc"
	"github.com/kairos-capi/kairos-capi/common/syntax"
)

// VIP is a virtual IP the control-plane nodes hold among themselves: the
// control-plane endpoint on infrastructure without a load balancer.
type VIP struct {
	// Address is the IP; it must be the endpoint host.
	Address string
	// PrefixLength of the address on its interface; 0 means a host address
	// (32 or 128).
	PrefixLength int32
	// Interface carries the address; empty lets k0s / kube-vip use the
	// interface of the default route.
	Interface string
	// VirtualRouterID is the k0s keepalived VRRP router ID, 1-255; 0 leaves
	// k0s' default (51). k3s does not use it.
	VirtualRouterID int32
	// KubeVIPImage (k3s only) is kube-vip's image; empty means
	// DefaultKubeVIPImage.
	KubeVIPImage string
}

// k0sCPLBVersion is the first k0s release with control-plane load balancing.
var k0sCPLBVersion = version.MustParseSemantic("v1.30.0")

// DefaultKubeVIPImage is the kube-vip the k3s servers run unless told
// otherwise: pinned, so that nodes created months apart run the same one.
// v1.0 names the prefix length vip_subnet (vip_cidr before).
const DefaultKubeVIPImage = "ghcr.io/kube-vip/kube-vip:v1.0.4"

// K3sVIPManifest is where k3s servers find the kube-vip manifest: k3s'
// deploy controller applies every file of the server manifests directory.
// It is outside the prefix of the user manifests (K3sManifestPrefix).
const K3sVIPManifest = K3sManifestDir + "/kairos-capi.vip.yaml"

func (v *VIP) prefixLength() int32 {
	if v.PrefixLength != 0 {
		return v.PrefixLength
	}
	if ip := net.ParseIP(v.Address); ip != nil && ip.To4() == nil {
		return 128
	}
	return 32
}

// validateVIP checks the virtual IP against the node: only control-plane
// nodes hold it, it is the endpoint the nodes and clients reach, and the API
// servers answer on it directly, so no port translation.
func (n *Node) validateVIP(p *problems) {
	v := n.VIP
	if v == nil {
		return
	}
	if n.Role != RoleControlPlane {
		p.add("VIP", "only control-plane nodes hold the virtual IP: remove it from worker configs")
		return
	}
	ip := net.ParseIP(v.Address)
	switch {
	case ip == nil:
		p.add("VIP.Address", "%q is not an IP address: a virtual IP is an address the nodes announce, never a DNS name", v.Address)
	case ip.IsUnspecified() || ip.IsMulticast():
		p.add("VIP.Address", "%s cannot be announced to other machines: use a free address of the nodes' network", v.Address)
	case n.Endpoint.Host == "":
		// checkEndpoint reports it.
	case !ip.Equal(net.ParseIP(n.Endpoint.Host)):
		p.add("VIP.Address", "%s is not the Cluster's spec.controlPlaneEndpoint.host %q: the nodes would hold an address no one connects to; set the endpoint host (on the Cluster or its infrastructure cluster) to the virtual IP", v.Address, n.Endpoint.Host)
	}
	if ip != nil {
		max := int32(32)
		if ip.To4() == nil {
			max = 128
		}
		if v.PrefixLength < 0 || v.PrefixLength > max {
			p.add("VIP.PrefixLength", "%d is not a prefix length of %s (1-%d)", v.PrefixLength, v.Address, max)
		}
	}
	if n.Network.APIServerPort != 0 && n.Network.APIServerPort != n.Endpoint.Port {
		p.add("Network.APIServerPort", "%d differs from the endpoint port %d, but the node holding the virtual IP answers on it itself: with a virtual IP both ports are the same", n.Network.APIServerPort, n.Endpoint.Port)
	}
	switch n.Distribution {
	case K0s:
		// Control-plane load balancing first shipped in k0s v1.30.0 (docs/cplb.md and
		// spec.network.controlPlaneLoadBalancing appear in v1.30.0+k0s.0): an older k0s
		// ignores the block and nothing would hold the address.
		if _, err := parseVersion(n.KubernetesVersion); err == nil && !atLeast(n.KubernetesVersion, k0sCPLBVersion) {
			p.add("VIP", "k0s holds a virtual IP with control-plane load balancing, which k0s has from v%s; %s is older: use Kubernetes v%s or later, or an endpoint with a load balancer instead of virtualIP",
				k0sCPLBVersion, n.KubernetesVersion, k0sCPLBVersion)
		}
		if v.VirtualRouterID < 0 || v.VirtualRouterID > 255 {
			p.add("VIP.VirtualRouterID", "%d is not a VRRP router ID (1-255)", v.VirtualRouterID)
		}
		if v.KubeVIPImage != "" {
			p.add("VIP.KubeVIPImage", "k0s holds the virtual IP with its own keepalived, not kube-vip: remove kubeVIPImage")
		}
	case K3s:
		if v.KubeVIPImage != "" && !syntax.IsImageReference(v.KubeVIPImage) {
			p.add("VIP.KubeVIPImage", "%q is not an image reference like %s", v.KubeVIPImage, DefaultKubeVIPImage)
		}
		// VirtualRouterID is not used: kube-vip elects the holder with a Kubernetes lease, not
		// VRRP. It is accepted (the API warns), so that a template serves both distributions.
	}
}

// vrrpAuthPass is the keepalived VRRP password of the cluster's instance.
// Every control plane node must send the same one; k0s requires one of at
// most 8 characters (pkg/apis/k0s/v1beta1/cplb.go ValidateVRRPInstances).
// VRRP sends it in clear text: it only keeps clusters sharing a broadcast
// domain apart, so it is derived from what tells them apart.
func (n *Node) vrrpAuthPass() string {
	sum := sha256.Sum256([]byte(n.ClusterName + "/" + n.VIP.Address))
	return hex.EncodeToString(sum[:4])
}

// k0sControlPlaneLoadBalancing is spec.network.controlPlaneLoadBalancing of
// the k0s ClusterConfig: one keepalived VRRP instance holding the virtual IP
// (k0s docs, "Control plane load balancing"). No virtual servers: the holder's
// own API server answers on the address.
func (n *Node) k0sControlPlaneLoadBalancing() map[string]any {
	v := n.VIP
	instance := map[string]any{
		// k0s wants CIDR notation (cplb.go: "VirtualIPs must be a CIDR").
		"virtualIPs": []any{v.Address + "/" + strconv.Itoa(int(v.prefixLength()))},
		"authPass":   n.vrrpAuthPass(),
	}
	if v.Interface != "" {
		instance["interface"] = v.Interface
	}
	if v.VirtualRouterID != 0 {
		instance["virtualRouterID"] = int(v.VirtualRouterID)
	}
	return map[string]any{
		"enabled":    true,
		"type":       "Keepalived",
		"keepalived": map[string]any{"vrrpInstances": []any{instance}},
	}
}

// k3sKubeVIPManifest deploys kube-vip on the k3s servers, as kube-vip's k3s
// guide does (a DaemonSet from the server manifests directory, since k3s
// starts its first server without the address): ARP announcements of the
// address by the holder of a Lease in kube-system, on every control-plane
// node. The first server serves the API on its own address until kube-vip
// runs; later servers and agents join through the address. The objects are
// built as values and encoded, so no field's value can change the YAML's
// shape (the image is checked in validateVIP).
func (n *Node) k3sKubeVIPManifest() (string, error) {
	v := n.VIP
	image := v.KubeVIPImage
	if image == "" {
		image = DefaultKubeVIPImage
	}
	var env []any
	for _, e := range [][2]string{
		{"address", v.Address},
		{"port", strconv.Itoa(int(n.apiServerPort()))},
		{"vip_interface", v.Interface},
		{"vip_subnet", strconv.Itoa(int(v.prefixLength()))},
		{"vip_arp", "true"},
		{"cp_enable", "true"},
		{"cp_namespace", "kube-system"},
		{"vip_leaderelection", "true"},
		{"vip_leasename", "plndr-cp-lock"},
		{"vip_leaseduration", "5"},
		{"vip_renewdeadline", "3"},
		{"vip_retryperiod", "1"},
	} {
		env = append(env, map[string]any{"name": e[0], "value": e[1]})
	}
	const name, namespace = "kube-vip", "kube-system"
	labels := map[string]any{"app.kubernetes.io/name": name}
	rule := func(group string, resources, verbs []any) map[string]any {
		return map[string]any{"apiGroups": []any{group}, "resources": resources, "verbs": verbs}
	}
	objects := []map[string]any{{
		"apiVersion": "v1", "kind": "ServiceAccount",
		"metadata": map[string]any{"name": name, "namespace": namespace},
	}, {
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": "system:kube-vip-role"},
		"rules": []any{
			rule("", []any{"services/status"}, []any{"update"}),
			rule("", []any{"services", "endpoints", "nodes"}, []any{"list", "get", "watch", "update"}),
			rule("coordination.k8s.io", []any{"leases"}, []any{"list", "get", "watch", "update", "create"}),
			rule("", []any{"events"}, []any{"create", "patch"}),
		},
	}, {
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "system:kube-vip-binding"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kube-vip-role"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": name, "namespace": namespace}},
	}, {
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{
					"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
						"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{
							map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
						}}},
					}}},
					"tolerations": []any{
						map[string]any{"operator": "Exists", "effect": "NoSchedule"},
						map[string]any{"operator": "Exists", "effect": "NoExecute"},
					},
					"hostNetwork":        true,
					"serviceAccountName": name,
					"containers": []any{map[string]any{
						"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
						"args": []any{"manager"},
						"env":  env,
						"securityContext": map[string]any{"capabilities": map[string]any{
							"add": []any{"NET_ADMIN", "NET_RAW"}, "drop": []any{"ALL"},
						}},
					}},
				},
			},
		},
	}}
	docs := make([]string, 0, len(objects))
	for _, o := range objects {
		e := yamlenc.New(1024)
		e.AnyMap(0, o)
		if err := e.Err(); err != nil {
			return "", fmt.Errorf("encoding the kube-vip manifest: %w", err)
		}
		docs = append(docs, string(e.Bytes()))
	}
	return strings.Join(docs, "---\n"), nil
}
