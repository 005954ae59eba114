package simnode

import (
	"context"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"github.com/kairos-capi/kairos-capi/test/framework"
)

// ProviderIDPrefix starts the provider IDs of simulated machines.
const ProviderIDPrefix = "kairos-sim://"

// ProviderID is the provider ID of the simulated machine namespace/name.
func ProviderID(namespace, name string) string {
	return ProviderIDPrefix + namespace + "/" + name
}

// Options configure a Registry.
type Options struct {
	// AssetsDir holds the etcd and kube-apiserver binaries. Default: framework.Assets().
	AssetsDir string
	// Dir holds the nodes' root directories and the clusters' files. Default: a temporary
	// directory that Close removes.
	Dir string
	// Logger receives what nodes and clusters do. Default: framework.Logger().
	Logger *logr.Logger
	// AddressPrefix is the first two octets of the nodes' addresses ("198.19": the nodes get
	// 198.19.0.1, 198.19.0.2, ...). Default: 127.<random>, loopback addresses. A provider that
	// drops loopback addresses (CAPV: CAPV/pkg/services/govmomi/util.go sanitizeIPAddrs)
	// needs addresses of a range the test routes locally, inside a network namespace of its
	// own (test/vsphere: 198.18.0.0/15, the benchmarking range); nothing else may route there.
	AddressPrefix string
}

// Registry holds the simulated nodes and workload clusters of a test process. It is the
// "real world" the infrastructure provider acts on: it survives manager restarts.
type Registry struct {
	assets string
	dir    string
	ownDir bool
	log    logr.Logger

	mu       sync.Mutex
	nodes    map[string]*Node    // by provider ID
	clusters map[string]*Cluster // by endpoint
	starting map[string]bool     // endpoints whose API server is starting
	reserved map[int]bool        // endpoint ports handed out
	subs     map[int]func(NodeEvent)
	nextSub  int
	// ipPrefix is 127.<random> (or Options.AddressPrefix): every node gets its own address
	// below it, so that several processes of simulated nodes (a test run, a sandbox) do not
	// collide.
	ipPrefix string
	ipSeq    int
	closed   bool
	// peers is the network between the etcd members of every cluster.
	peers peerNet
	// heldStarts are the namespaces whose joining servers stall after joining etcd
	// (HoldServerStarts).
	heldStarts map[string]bool
	// broken are the images that do not boot (BreakImage).
	broken map[string]bool
}

// HoldServerStarts makes the joining control-plane nodes of a namespace started from now on
// stall right after their etcd member joined, while hold is true: their kubelet does not register
// a Node and their machines report no address until then (as when the guest agent that reports
// them is not up yet). Until
// released, such a member matches no Machine: the control plane sees a running member it cannot
// place.
func (r *Registry) HoldServerStarts(namespace string, hold bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.heldStarts == nil {
		r.heldStarts = map[string]bool{}
	}
	r.heldStarts[namespace] = hold
}

func (r *Registry) serverStartsHeld(namespace string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heldStarts[namespace]
}

// NodeEvent tells that the status of the node of a KairosSimMachine (Name) or of an instance
// (Name) of a KairosSimMachinePool (Pool) changed.
type NodeEvent struct {
	Namespace, Name, Pool, ProviderID string
}

// NewRegistry creates an empty registry.
func NewRegistry(o Options) (*Registry, error) {
	r := &Registry{
		assets: o.AssetsDir, dir: o.Dir,
		nodes: map[string]*Node{}, clusters: map[string]*Cluster{}, starting: map[string]bool{},
		reserved: map[int]bool{}, subs: map[int]func(NodeEvent){},
		ipPrefix: fmt.Sprintf("127.%d", 2+mathrand.IntN(250)),
	}
	if o.AddressPrefix != "" {
		ip := net.ParseIP(o.AddressPrefix + ".0.1").To4()
		if ip == nil || strings.Count(o.AddressPrefix, ".") != 1 {
			return nil, fmt.Errorf("address prefix %q: want the first two octets of an IPv4 address, such as 198.19", o.AddressPrefix)
		}
		r.ipPrefix = o.AddressPrefix
	}
	if o.Logger != nil {
		r.log = *o.Logger
	} else {
		r.log = framework.Logger()
	}
	r.log = r.log.WithName("simnode")
	if r.assets == "" {
		dir, err := framework.Assets()
		if err != nil {
			return nil, err
		}
		r.assets = dir
	}
	if r.dir == "" {
		dir, err := os.MkdirTemp("", "kairos-simnode-")
		if err != nil {
			return nil, err
		}
		r.dir, r.ownDir = dir, true
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	return r, nil
}

// ReserveEndpoint returns 127.0.0.1:<port> for a new cluster: a port nothing listens on and
// that no other cluster of this registry got.
func (r *Registry) ReserveEndpoint() (host string, port int32, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for range 20 {
		p, err := freePort()
		if err != nil {
			return "", 0, err
		}
		if !r.reserved[p] {
			r.reserved[p] = true
			return "127.0.0.1", int32(p), nil
		}
	}
	return "", 0, fmt.Errorf("no free port found")
}

// StartNode boots the node of a simulated machine, once: a node that exists and is not stopped
// is returned as it is (the bootstrap data is consumed once). Booting continues in the
// background; follow it with Node.Status or Subscribe.
func (r *Registry) StartNode(spec NodeSpec) (*Node, error) {
	if spec.ProviderID == "" {
		spec.ProviderID = ProviderID(spec.Namespace, spec.Name)
	}
	if _, _, err := net.SplitHostPort(spec.Endpoint); err != nil {
		return nil, fmt.Errorf("node %s: endpoint %q: %w", spec.ProviderID, spec.Endpoint, err)
	}
	if err := checkImageSpec(spec); err != nil {
		return nil, fmt.Errorf("node %s: %w", spec.ProviderID, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("the registry is closed")
	}
	if n := r.nodes[spec.ProviderID]; n != nil && n.Status().Phase != PhaseStopped {
		return n, nil
	}
	root, err := os.MkdirTemp(r.dir, "node-"+spec.Name+"-")
	if err != nil {
		return nil, err
	}
	ip, err := r.nextIP()
	if err != nil {
		return nil, err
	}
	if spec.SystemUUID == "" {
		spec.SystemUUID = randomUUID()
	}
	// What the firmware tells the machine about itself, where a real node reads it.
	dmi := filepath.Join(root, "sys", "class", "dmi", "id")
	if err := os.MkdirAll(dmi, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dmi, "product_uuid"), []byte(spec.SystemUUID+"\n"), 0o444); err != nil {
		return nil, err
	}
	for path, content := range spec.Files {
		full := filepath.Join(root, filepath.Clean("/"+path))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	n := newNode(r, spec, root, ip)
	// A machine whose joining server will be held has no guest agent up yet: no address.
	n.addressesHidden.Store(r.heldStarts[spec.Namespace])
	r.nodes[spec.ProviderID] = n
	n.start()
	return n, nil
}

// nextIP hands out the next node address whose etcd ports nothing uses. Must be called with mu
// held.
func (r *Registry) nextIP() (string, error) {
	for range 500 {
		r.ipSeq++
		ip := fmt.Sprintf("%s.%d.%d", r.ipPrefix, r.ipSeq/250, r.ipSeq%250+1)
		free := true
		for _, port := range []int{etcdClientPort, etcdPeerPort, etcdLocalClientPort, etcdLocalPeerPort} {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			_ = l.Close()
		}
		if free {
			return ip, nil
		}
	}
	return "", fmt.Errorf("no free node address below %s", r.ipPrefix)
}

// Node returns the node with a provider ID, or nil.
func (r *Registry) Node(providerID string) *Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nodes[providerID]
}

// NodeFor returns the node of the KairosSimMachine namespace/name, or nil; a machine started
// again after it stopped has a new node, which wins.
func (r *Registry) NodeFor(namespace, name string) *Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	var found *Node
	for _, n := range r.nodes {
		if n.spec.Namespace == namespace && n.spec.Name == name && (found == nil || found.Status().Phase == PhaseStopped) {
			found = n
		}
	}
	return found
}

// Nodes returns every node, sorted by provider ID.
func (r *Registry) Nodes() []*Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Node, 0, len(r.nodes))
	for _, n := range r.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].spec.ProviderID < out[j].spec.ProviderID })
	return out
}

// NodesOf returns the nodes whose machines belong to the cluster at endpoint.
func (r *Registry) NodesOf(endpoint string) []*Node {
	var out []*Node
	for _, n := range r.Nodes() {
		if n.spec.Endpoint == endpoint {
			out = append(out, n)
		}
	}
	return out
}

// PoolNodes returns the nodes of the KairosSimMachinePool namespace/pool that are not stopped,
// sorted by provider ID. The registry is the pool's "cloud": what runs there is what the pool
// has, whatever its object says and however often its controller restarted.
func (r *Registry) PoolNodes(namespace, pool string) []*Node {
	var out []*Node
	for _, n := range r.Nodes() {
		if n.spec.Namespace == namespace && n.spec.Pool == pool && n.Status().Phase != PhaseStopped {
			out = append(out, n)
		}
	}
	return out
}

// serverRunning tells whether a control-plane node (one with an etcd member) of the cluster at
// an endpoint has not been stopped.
func (r *Registry) serverRunning(endpoint string) bool {
	for _, n := range r.NodesOf(endpoint) {
		n.mu.Lock()
		server, stopped := n.etcd != nil, n.status.Phase == PhaseStopped
		n.mu.Unlock()
		if server && !stopped {
			return true
		}
	}
	return false
}

// StopNode stops a node (its machine went away). Its Node object stays in the workload cluster
// (Cluster API deletes it) and so does its etcd membership (a leave request removes it).
func (r *Registry) StopNode(providerID string) {
	if n := r.Node(providerID); n != nil {
		n.stop()
	}
}

// Cluster returns the workload cluster at an endpoint (host:port), or nil.
func (r *Registry) Cluster(endpoint string) *Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clusters[endpoint]
}

// ClusterAt returns the workload cluster at host and port, or nil.
func (r *Registry) ClusterAt(host string, port int32) *Cluster {
	return r.Cluster(net.JoinHostPort(host, strconv.Itoa(int(port))))
}

// StopCluster stops the workload cluster at an endpoint (its infrastructure went away) and
// every node still running for it.
func (r *Registry) StopCluster(endpoint string) {
	for _, n := range r.NodesOf(endpoint) {
		n.stop()
	}
	r.mu.Lock()
	c := r.clusters[endpoint]
	delete(r.clusters, endpoint)
	r.mu.Unlock()
	if c != nil {
		r.log.Info("Stopping workload cluster", "endpoint", endpoint)
		c.Stop()
	}
}

// Subscribe calls fn whenever the status of a node changes; the returned function
// unsubscribes. fn must not block.
func (r *Registry) Subscribe(fn func(NodeEvent)) (unsubscribe func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.nextSub
	r.nextSub++
	r.subs[id] = fn
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.subs, id)
	}
}

func (r *Registry) notify(e NodeEvent) {
	r.mu.Lock()
	subs := make([]func(NodeEvent), 0, len(r.subs))
	for _, fn := range r.subs {
		subs = append(subs, fn)
	}
	r.mu.Unlock()
	for _, fn := range subs {
		fn(e)
	}
}

// Close stops every node and cluster and removes the registry's directory if it created it.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	for _, n := range r.Nodes() {
		n.stop()
	}
	r.mu.Lock()
	clusters := make([]*Cluster, 0, len(r.clusters))
	for ep, c := range r.clusters {
		clusters = append(clusters, c)
		delete(r.clusters, ep)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range clusters {
		wg.Add(1)
		go func() { defer wg.Done(); c.Stop() }()
	}
	wg.Wait()
	if r.ownDir {
		_ = os.RemoveAll(r.dir)
	}
}

// initCluster starts the workload cluster of an init node. A second init node for a running
// cluster is refused: it would create another cluster behind the same endpoint. The same node
// booting again (its first attempt failed after the cluster started) finds its own cluster, as
// a real k0s or k3s node retrying its init reuses its data.
func (r *Registry) initCluster(ctx context.Context, endpoint string, p *plan, cp *clusterPKI, init *etcdServer) (*Cluster, error) {
	r.mu.Lock()
	if c := r.clusters[endpoint]; c != nil && c.Running() {
		r.mu.Unlock()
		if c.init == init.node {
			return c, nil
		}
		return nil, refuse(ReasonClusterExists, "a cluster already runs at %s: this init node would create a second one", endpoint)
	}
	if r.starting[endpoint] {
		r.mu.Unlock()
		return nil, refuse(ReasonClusterExists, "another init node is creating the cluster at %s", endpoint)
	}
	r.starting[endpoint] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.starting, endpoint)
		r.mu.Unlock()
	}()

	r.log.Info("Starting workload cluster", "endpoint", endpoint, "distribution", p.distribution)
	c, err := r.startCluster(ctx, endpoint, p, cp, init)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		go c.Stop()
		return nil, fmt.Errorf("the registry is closed")
	}
	if old := r.clusters[endpoint]; old != nil {
		go old.Stop()
	}
	r.clusters[endpoint] = c
	c.startLoop()
	return c, nil
}

// randomUUID returns a random RFC 4122 version 4 UUID in lower case.
func randomUUID() string {
	h := randomHex(16)
	b := []byte(h)
	b[12] = '4'
	b[16] = "89ab"[int(b[16])%4]
	return fmt.Sprintf("%s-%s-%s-%s-%s", b[0:8], b[8:12], b[12:16], b[16:20], b[20:32])
}
