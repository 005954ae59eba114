package render

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/kairos-capi/kairos-capi/common/internal/yamlenc"
	"github.com/kairos-capi/kairos-capi/common/merge"
)

const (
	k0sAPIVersion = "k0s.k0sproject.io/v1beta1"
	k0sKind       = "ClusterConfig"
	// k0sDefaultName is the metadata.name "k0s config create" writes; a
	// user Config copied from it is accepted.
	k0sDefaultName = "k0s"
)

func (b *builder) k0sController() {
	n := b.n
	b.file(K0sConfigPath, 0o600, b.k0sConfig)
	// --enable-worker: a controller without a kubelet registers no Node and
	// its Machine never gets a nodeRef. Never --single: it refuses joins.
	args := make([]string, 0, 4+len(n.Args))
	args = append(args, "--config="+K0sConfigPath, "--enable-worker")
	if n.SingleNode {
		args = append(args, "--no-taints")
	}
	if n.VIP != nil {
		// With control-plane load balancing and spec.api.externalAddress
		// set, k0s requires the endpoint reconciler off (k0s docs, "Control
		// plane load balancing", External address).
		args = append(args, "--disable-components=endpoint-reconciler")
	}
	p := n.PKI
	if n.Init {
		// The init controller creates the cluster with the management
		// cluster's CA.
		b.file(K0sPKIDir+"/ca.crt", 0o644, string(p.ClusterCA.Cert))
		b.file(K0sPKIDir+"/ca.key", 0o600, string(p.ClusterCA.Key))
	} else {
		b.file(K0sTokenPath, 0o600, strings.TrimSpace(n.JoinToken))
		args = append(args, "--token-file="+K0sTokenPath)
		// Joining controllers get the CA from the k0s join API (which serves
		// the init controller's, so the management CA) instead of a
		// pre-seeded ca.crt/ca.key: k0s before v1.29.13, v1.30.9 and v1.31.5
		// decides whether to join by looking for ca.key and ca.crt first
		// (cmd/controller/controller.go needToJoin; the etcd data directory
		// is checked first since k0s commit 8db9cb21 "join node creates new
		// cluster when initial etcd sync config fails"), so a pre-seeded CA
		// made those versions skip the join and start a second etcd cluster.
		// Without it every k0s version joins; the join API writes ca.* and
		// sa.* itself.
	}
	b.file(K0sPKIDir+"/sa.pub", 0o644, string(p.ServiceAccount.Cert))
	b.file(K0sPKIDir+"/sa.key", 0o600, string(p.ServiceAccount.Key))
	b.file(K0sPKIDir+"/front-proxy-ca.crt", 0o644, string(p.FrontProxyCA.Cert))
	b.file(K0sPKIDir+"/front-proxy-ca.key", 0o600, string(p.FrontProxyCA.Key))
	b.file(K0sPKIDir+"/etcd/ca.crt", 0o644, string(p.EtcdCA.Cert))
	b.file(K0sPKIDir+"/etcd/ca.key", 0o600, string(p.EtcdCA.Key))
	for _, m := range n.Manifests {
		// Manifests may hold secrets (bootstrap tokens): 0600.
		b.file(K0sManifestDir+"/"+m.Name+".yaml", 0o600, m.Content)
	}
	b.cfg.K0s = b.distribution(args)
}

func (b *builder) k0sWorker() {
	b.file(K0sTokenPath, 0o600, strings.TrimSpace(b.n.JoinToken))
	args := make([]string, 0, 2+len(b.n.Args))
	args = append(args, "--token-file="+K0sTokenPath, "--taints="+UninitializedTaint)
	b.cfg.K0sWorker = b.distribution(args)
}

// k0sGeneratedKeys say where the generated ClusterConfig keys come from, for
// the message when a user Config sets one of them too.
var k0sGeneratedKeys = map[string]string{
	"spec.api.externalAddress":                       "the Cluster's spec.controlPlaneEndpoint",
	"spec.api.sans":                                  "the Cluster's spec.controlPlaneEndpoint",
	"spec.api.port":                                  "the Cluster's spec.clusterNetwork.apiServerPort (the endpoint port when unset)",
	"spec.network.podCIDR":                           "the Cluster's spec.clusterNetwork.pods.cidrBlocks",
	"spec.network.serviceCIDR":                       "the Cluster's spec.clusterNetwork.services.cidrBlocks",
	"spec.network.dualStack":                         "the Cluster's spec.clusterNetwork (dual-stack pods and services)",
	"spec.network.clusterDomain":                     "the Cluster's spec.clusterNetwork.serviceDomain",
	"spec.storage.etcd.extraArgs.listen-client-urls": "kairos-capi: the control plane checks each etcd member on its own address",
	"spec.network.controlPlaneLoadBalancing":         "spec.virtualIP",
}

// k0sClusterConfig returns /etc/k0s/k0s.yaml: the endpoint as external
// address and SAN, the port the API servers bind to, the Cluster's network,
// etcd's client API on the node's addresses (see EtcdClientPort), and the
// user's partial ClusterConfig merged in (keys set by both are errors).
func k0sClusterConfig(n *Node) (string, error) {
	spec := map[string]any{
		"api": map[string]any{
			"externalAddress": n.k0sExternalAddress(),
			"port":            int(n.apiServerPort()),
			"sans":            []any{n.Endpoint.Host},
		},
		"storage": map[string]any{
			"etcd": map[string]any{
				"extraArgs": map[string]any{"listen-client-urls": K0sEtcdListenClientURLs},
			},
		},
	}
	network := n.k0sNetwork()
	if n.VIP != nil {
		network["controlPlaneLoadBalancing"] = n.k0sControlPlaneLoadBalancing()
	}
	if len(network) > 0 {
		spec["network"] = network
	}
	cfg := map[string]any{
		"apiVersion": k0sAPIVersion,
		"kind":       k0sKind,
		"metadata":   map[string]any{"name": n.ClusterName},
		"spec":       spec,
	}
	if strings.TrimSpace(n.Config) != "" {
		user, err := userConfigs.get(n.Config, n.ClusterName)
		if err != nil {
			return "", err
		}
		if err := merge.MergeValues(cfg, BaseName, user, "Config"); err != nil {
			var ce *merge.ConflictError
			if errors.As(err, &ce) && ce.FirstKind == "" {
				for key, from := range k0sGeneratedKeys {
					if ce.Key == key || strings.HasPrefix(ce.Key, key+".") {
						return "", &FieldError{Field: "Config", Path: ce.Key, Err: fmt.Errorf("is set from %s: remove it here", from)}
					}
				}
			}
			return "", err
		}
		if err := checkNodeLocalLoadBalancing(user); err != nil {
			return "", err
		}
	}
	e := yamlenc.New(512 + len(n.Config))
	e.AnyMap(0, cfg)
	if err := e.Err(); err != nil {
		return "", err
	}
	return string(e.Bytes()), nil
}

// checkNodeLocalLoadBalancing refuses node-local load balancing in a user ClusterConfig: k0s
// refuses to start with it next to spec.api.externalAddress (ClusterConfig validation, "node-local
// load balancing cannot be used in conjunction with an external Kubernetes API server address";
// docs/nllb.md), and the generated ClusterConfig always sets externalAddress to the Cluster's
// endpoint, the address nodes and clients reach.
func checkNodeLocalLoadBalancing(user map[string]any) error {
	spec, _ := user["spec"].(map[string]any)
	network, _ := spec["network"].(map[string]any)
	nllb, _ := network["nodeLocalLoadBalancing"].(map[string]any)
	if enabled, _ := nllb["enabled"].(bool); enabled {
		return &FieldError{Field: "Config", Path: "spec.network.nodeLocalLoadBalancing.enabled", Err: errors.New(
			"k0s refuses node-local load balancing together with spec.api.externalAddress, which is always set from the Cluster's spec.controlPlaneEndpoint: remove it, and reach the API servers through the endpoint (a load balancer or spec.virtualIP)")}
	}
	return nil
}

// userConfigCache keeps parsed user ClusterConfigs: every control-plane
// Machine of a KairosControlPlane, and every admission dry render of it, has
// the same one, and parsing YAML is the most expensive step of rendering. Entries are never modified (MergeValues copies
// what it takes from them); the cache is cleared when it is full.
type userConfigCache struct {
	mu      sync.Mutex
	entries map[[2]string]userConfigEntry
}

type userConfigEntry struct {
	m   map[string]any
	err error
}

const userConfigCacheSize = 256

var userConfigs = &userConfigCache{entries: map[[2]string]userConfigEntry{}}

func (c *userConfigCache) get(config, clusterName string) (map[string]any, error) {
	if len(config) > 64<<10 {
		return parseK0sUserConfig(config, clusterName) // too big to keep
	}
	key := [2]string{config, clusterName}
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok {
		return e.m, e.err
	}
	m, err := parseK0sUserConfig(config, clusterName)
	c.mu.Lock()
	if len(c.entries) >= userConfigCacheSize {
		clear(c.entries)
	}
	c.entries[key] = userConfigEntry{m: m, err: err}
	c.mu.Unlock()
	return m, err
}

// parseK0sUserConfig decodes a partial ClusterConfig. apiVersion, kind and
// metadata.name may be present when they agree with the generated ones.
func parseK0sUserConfig(s, clusterName string) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("not a YAML map: %w", err)
	}
	if m == nil {
		return map[string]any{}, nil
	}
	var errs []error
	for _, pr := range checkK0sConfig(m) {
		errs = append(errs, &FieldError{Field: "Config", Path: pr[0], Err: errors.New(pr[1])})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if v, ok := m["apiVersion"]; ok {
		if v != k0sAPIVersion {
			return nil, fmt.Errorf("apiVersion %v is not %s", v, k0sAPIVersion)
		}
		delete(m, "apiVersion")
	}
	if v, ok := m["kind"]; ok {
		if v != k0sKind {
			return nil, fmt.Errorf("kind %v is not %s", v, k0sKind)
		}
		delete(m, "kind")
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		if name, ok := md["name"]; ok {
			if name != clusterName && name != k0sDefaultName {
				return nil, fmt.Errorf("metadata.name %v is not the cluster name %s", name, clusterName)
			}
			delete(md, "name")
		}
		if len(md) == 0 {
			delete(m, "metadata")
		}
	}
	return m, nil
}
