package fleet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"k8s.io/apimachinery/pkg/version"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
	"github.com/kairos-capi/kairos-capi/test/simnode"
)

// Distribution is what a simulated cluster runs; it decides where etcd membership shows in the
// API (k0s: EtcdMember objects; k3s: Node annotations).
type Distribution string

const (
	K0s Distribution = "k0s"
	K3s Distribution = "k3s"
)

// Options configure a Fleet.
type Options struct {
	// APIHost is the address every cluster's API server listens at, each on a port of its own.
	// Default 127.0.0.1.
	APIHost string
	// FirstNodeAddress is the node address of the first cluster; the next clusters get the
	// addresses after it. Each node's etcd member listens at its node address on EtcdPort, as
	// the control plane dials every member at <machine address>:2379, so every node needs an
	// address of its own: loopback addresses (all of 127.0.0.0/8 on Linux) serve. Default
	// 127.100.0.1, which leaves room for 65,000 nodes before 127.101.
	FirstNodeAddress netip.Addr
	// EtcdPort is the etcd client port. Default render.EtcdClientPort (2379).
	EtcdPort int
	// LeaseInterval is how often a kubelet renews its Lease. Default 10 s.
	LeaseInterval time.Duration
	// StatusInterval is how often a kubelet reports an unchanged Node status. Default 5 min.
	StatusInterval time.Duration
	// WatchHistory is how many recent changes of each kind each cluster keeps for watches that
	// resume from an older resourceVersion; older ones get 410 Gone and relist. Default 16.
	WatchHistory int
	// BookmarkInterval is how often a watch that allows bookmarks gets one. Default a minute,
	// the API server's watch cache's bookmark frequency.
	BookmarkInterval time.Duration
	// Agents, when set, also counts every cluster's requests per client: a request is counted
	// for the first entry its User-Agent header contains, or for none of them (Cluster.AgentStats).
	// Cluster API's clients name their manager in the user agent
	// (remote.DefaultClusterAPIUserAgent), so the benchmark tells the control-plane manager's
	// requests from the bootstrap manager's and Cluster API core's this way.
	Agents []string
}

func (o *Options) defaults() {
	if o.APIHost == "" {
		o.APIHost = "127.0.0.1"
	}
	if !o.FirstNodeAddress.IsValid() {
		o.FirstNodeAddress = netip.AddrFrom4([4]byte{127, 100, 0, 1})
	}
	if o.EtcdPort == 0 {
		o.EtcdPort = render.EtcdClientPort
	}
	if o.LeaseInterval == 0 {
		o.LeaseInterval = 10 * time.Second
	}
	if o.StatusInterval == 0 {
		o.StatusInterval = 5 * time.Minute
	}
	if o.WatchHistory == 0 {
		o.WatchHistory = 16
	}
	if o.BookmarkInterval == 0 {
		o.BookmarkInterval = time.Minute
	}
}

// Fleet serves simulated single-node workload clusters from one process.
type Fleet struct {
	opts       Options
	servingKey *ecdsa.PrivateKey
	etcd       *etcdServer
	kubelets   *scheduler

	mu       sync.Mutex
	nextNode netip.Addr
	clusters map[string]*Cluster // by namespace/name
	closed   bool
}

// New starts an empty fleet.
func New(opts Options) (*Fleet, error) {
	opts.defaults()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the fleet's serving key: %w", err)
	}
	return &Fleet{
		opts: opts, servingKey: key, etcd: newEtcdServer(), kubelets: newScheduler(),
		nextNode: opts.FirstNodeAddress, clusters: map[string]*Cluster{},
	}, nil
}

// ClusterSpec describes one simulated workload cluster: one control-plane node with one etcd
// member.
type ClusterSpec struct {
	// Namespace and Name are the Cluster API Cluster's.
	Namespace, Name string
	// Distribution defaults to K0s.
	Distribution Distribution
	// MachineName is the control-plane Machine's name, which the default node name and
	// provider ID follow. Default <Name>-cp-0.
	MachineName string
	// NodeName defaults to MachineName.
	NodeName string
	// ProviderID is the Node's spec.providerID as the infrastructure provider sets it.
	// Default simnode.ProviderID(Namespace, MachineName), test/infrastructure's form.
	ProviderID string
	// CA is the cluster's CA (the management cluster's <cluster>-ca): the API server serves
	// with a certificate it signed and accepts client certificates it signed. Default: a new
	// CA of the fleet's own.
	CA *pki.KeyPair
	// EtcdCA is the cluster's etcd CA (<cluster>-etcd), the same way for the etcd member.
	EtcdCA *pki.KeyPair
	// KubernetesVersion is what /version and the Node report. Default v1.34.1.
	KubernetesVersion string
	// APIListener, when set, is where the API server serves (the cluster takes it over and
	// closes it with itself) instead of a new listener on Options.APIHost: a benchmark opens it
	// first, to give the Cluster its controlPlaneEndpoint before the machine boots and its
	// Node is named after the Machine.
	APIListener net.Listener
}

// Cluster is one simulated workload cluster.
type Cluster struct {
	f      *Fleet
	spec   ClusterSpec
	res    *resourceSet
	store  *store
	member *member
	nodeIP netip.Addr

	ca, etcdCA *ca
	version    []byte

	api     *http.Server
	apiAddr string
	etcdLn  net.Listener
	etcdTLS *tls.Config

	closing   chan struct{}
	closeOnce sync.Once

	stats stats
	// byAgent counts per Options.Agents entry, the last one for every other client.
	byAgent []stats
	etcdCounters
}

var discardLog = log.New(io.Discard, "", 0)

// Add starts a cluster: its API server and etcd member listening, its Node registered and
// Ready, its kubelet beating.
func (f *Fleet) Add(spec ClusterSpec) (*Cluster, error) {
	if spec.Name == "" {
		return nil, errors.New("a simulated cluster needs a name")
	}
	if spec.Namespace == "" {
		spec.Namespace = "default"
	}
	if spec.Distribution == "" {
		spec.Distribution = K0s
	}
	if spec.MachineName == "" {
		spec.MachineName = spec.Name + "-cp-0"
	}
	if spec.NodeName == "" {
		spec.NodeName = spec.MachineName
	}
	if spec.ProviderID == "" {
		spec.ProviderID = simnode.ProviderID(spec.Namespace, spec.MachineName)
	}
	if spec.KubernetesVersion == "" {
		spec.KubernetesVersion = "v1.34.1"
	}
	key := spec.Namespace + "/" + spec.Name
	c := &Cluster{f: f, spec: spec, store: newStore(f.opts.WatchHistory), closing: make(chan struct{})}
	if len(f.opts.Agents) > 0 {
		c.byAgent = make([]stats, len(f.opts.Agents)+1)
	}
	switch spec.Distribution {
	case K0s:
		c.res = k0sResources
	case K3s:
		c.res = k3sResources
	default:
		return nil, fmt.Errorf("cluster %s: unknown distribution %q", key, spec.Distribution)
	}
	if err := c.setupPKI(); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", key, err)
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errors.New("the fleet is closed")
	}
	if _, ok := f.clusters[key]; ok {
		f.mu.Unlock()
		return nil, fmt.Errorf("cluster %s already exists", key)
	}
	c.nodeIP = f.nextNode
	f.nextNode = f.nextNode.Next()
	f.clusters[key] = c
	f.mu.Unlock()
	if err := c.start(); err != nil {
		c.Close()
		f.mu.Lock()
		delete(f.clusters, key)
		f.mu.Unlock()
		return nil, fmt.Errorf("starting cluster %s: %w", key, err)
	}
	return c, nil
}

func (c *Cluster) setupPKI() error {
	get := func(given *pki.KeyPair, cn string) (*ca, error) {
		if given == nil {
			kp, err := NewCA(cn)
			if err != nil {
				return nil, err
			}
			given = kp
		}
		return parseCA(*given)
	}
	var err error
	if c.ca, err = get(c.spec.CA, "kubernetes"); err != nil {
		return fmt.Errorf("the cluster CA: %w", err)
	}
	if c.etcdCA, err = get(c.spec.EtcdCA, "etcd-ca"); err != nil {
		return fmt.Errorf("the etcd CA: %w", err)
	}
	return nil
}

func (c *Cluster) start() error {
	f := c.f
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	id := binary.BigEndian.Uint64(idb[:]) | 1
	name := c.spec.NodeName
	if c.spec.Distribution == K3s {
		name = fmt.Sprintf("%s-%08x", c.spec.NodeName, uint32(id))
	}
	ip := c.nodeIP.String()
	c.member = &member{
		id: id, clusterID: id ^ 0x5eed, name: name,
		peerURL:   "https://" + net.JoinHostPort(ip, "2380"),
		clientURL: "https://" + net.JoinHostPort(ip, strconv.Itoa(f.opts.EtcdPort)),
	}
	minor := strings.SplitN(strings.TrimPrefix(c.spec.KubernetesVersion, "v"), ".", 3)
	vi := version.Info{GitVersion: c.spec.KubernetesVersion + "+" + string(c.spec.Distribution), Platform: "linux/amd64"}
	if len(minor) >= 2 {
		vi.Major, vi.Minor = minor[0], minor[1]
	}
	c.version = mustJSON(vi)

	// The API server.
	apiCert, err := c.ca.serving(f.servingKey, "kube-apiserver",
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(f.opts.APIHost), c.nodeIP.AsSlice()},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", c.spec.NodeName})
	if err != nil {
		return fmt.Errorf("the API server certificate: %w", err)
	}
	ln := c.spec.APIListener
	if ln == nil {
		if ln, err = net.Listen("tcp", net.JoinHostPort(f.opts.APIHost, "0")); err != nil {
			return fmt.Errorf("listening for the API server: %w", err)
		}
	}
	c.apiAddr = ln.Addr().String()
	c.api = &http.Server{
		Handler: c,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{apiCert},
			// Like kube-apiserver: ask for a certificate, verify it in the authenticator, and
			// answer 401 rather than failing the handshake.
			ClientAuth: tls.RequestClientCert,
			// Counts handshakes; nil keeps this configuration.
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				c.stats.handshakes.Add(1)
				return nil, nil
			},
		},
		ConnContext:       connContext,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          discardLog,
	}
	go func() { _ = c.api.ServeTLS(ln, "", "") }()

	// The etcd member.
	etcdCert, err := c.etcdCA.serving(f.servingKey, c.member.name,
		[]net.IP{net.ParseIP("127.0.0.1"), c.nodeIP.AsSlice()}, []string{"localhost", c.spec.NodeName})
	if err != nil {
		return fmt.Errorf("the etcd server certificate: %w", err)
	}
	c.etcdTLS = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{etcdCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.etcdCA.pool,
		NextProtos:   []string{"h2"},
		// Called on every handshake that succeeds, full or resumed: the benchmark tells the
		// cheap ones (a session ticket, no signature or chain to check) from the full ones.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.DidResume {
				c.etcdResumed.Add(1)
			}
			return nil
		},
	}
	eln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(f.opts.EtcdPort)))
	if err != nil {
		return fmt.Errorf("listening for etcd: %w", err)
	}
	c.etcdLn = eln
	f.etcd.byAddr.Store(eln.Addr().String(), c)
	go func() { _ = f.etcd.grpc.Serve(eln) }()

	now := time.Now()
	if err := c.seed(now); err != nil {
		return err
	}
	c.schedule(f.kubelets, now)
	return nil
}

// seed writes what a freshly started single-node cluster holds that the managers look at.
func (c *Cluster) seed(now time.Time) error {
	s := c.store
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ns := range []string{"default", "kube-system", "kube-public", nodeLeaseNamespace} {
		if _, err := c.create(resNamespaces, "", object{"metadata": object{"name": ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	if _, err := c.create(resNodes, "", mustObject(c.node(now))); err != nil {
		return fmt.Errorf("registering Node %s: %w", c.spec.NodeName, err)
	}
	if _, err := c.create(resLeases, nodeLeaseNamespace, mustObject(c.lease(now))); err != nil {
		return fmt.Errorf("creating the lease of %s: %w", c.spec.NodeName, err)
	}
	if c.spec.Distribution == K0s {
		em := c.etcdMember(now)
		if _, err := c.create(resEtcdMembers, "", em); err != nil {
			return fmt.Errorf("creating EtcdMember %s: %w", c.member.name, err)
		}
		if _, err := c.update(resEtcdMembers, "", c.member.name, c.etcdMember(now), "status", true); err != nil {
			return fmt.Errorf("writing the status of EtcdMember %s: %w", c.member.name, err)
		}
	}
	return nil
}

// Close stops the cluster's servers and kubelet; its clients see connections refused.
func (c *Cluster) Close() {
	c.closeOnce.Do(func() {
		close(c.closing)
		if c.api != nil {
			_ = c.api.Close()
		}
		if c.etcdLn != nil {
			c.f.etcd.byAddr.Delete(c.etcdLn.Addr().String())
			_ = c.etcdLn.Close()
		}
		c.store.closeWatchers()
	})
}

// Close stops every cluster.
func (f *Fleet) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	clusters := make([]*Cluster, 0, len(f.clusters))
	for _, c := range f.clusters {
		clusters = append(clusters, c)
	}
	f.mu.Unlock()
	f.kubelets.close()
	for _, c := range clusters {
		c.Close()
	}
	f.etcd.grpc.Stop()
}

// Clusters returns the fleet's clusters.
func (f *Fleet) Clusters() []*Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Cluster, 0, len(f.clusters))
	for _, c := range f.clusters {
		out = append(out, c)
	}
	return out
}

// KubeletErrors counts kubelet beats that failed to write.
func (f *Fleet) KubeletErrors() int {
	f.kubelets.mu.Lock()
	defer f.kubelets.mu.Unlock()
	return f.kubelets.errors
}

// Name is the Cluster API cluster's name.
func (c *Cluster) Name() string { return c.spec.Name }

// Endpoint is the API server's host:port (the Cluster's spec.controlPlaneEndpoint).
func (c *Cluster) Endpoint() string { return c.apiAddr }

// NodeAddress is the node's InternalIP: the address an infrastructure provider reports on the
// Machine, at which the control plane dials its etcd member.
func (c *Cluster) NodeAddress() netip.Addr { return c.nodeIP }

// NodeName is the Node's name.
func (c *Cluster) NodeName() string { return c.spec.NodeName }

// ProviderID is the Node's provider ID.
func (c *Cluster) ProviderID() string { return c.spec.ProviderID }

// EtcdEndpoint is the member's client URL.
func (c *Cluster) EtcdEndpoint() string { return c.member.clientURL }

// EtcdMemberID is the member's ID.
func (c *Cluster) EtcdMemberID() uint64 { return c.member.id }

// EtcdMemberName is the member's name: the node name for k0s, <node>-<8 hex> for k3s.
func (c *Cluster) EtcdMemberName() string { return c.member.name }

// CA is the cluster's CA; EtcdCA its etcd CA.
func (c *Cluster) CA() pki.KeyPair     { return c.ca.kp }
func (c *Cluster) EtcdCA() pki.KeyPair { return c.etcdCA.kp }

// Stats returns the API server's request counts.
func (c *Cluster) Stats() Stats { return c.stats.snapshot() }

// AgentStats returns the API server's request counts of the clients whose User-Agent contains
// Options.Agents[i]; i == len(Options.Agents) counts every other client. Handshakes are not
// split (a connection's client is known only from its first request); zero without Agents.
func (c *Cluster) AgentStats(i int) Stats {
	if i < 0 || i >= len(c.byAgent) {
		return Stats{}
	}
	return c.byAgent[i].snapshot()
}

// agent is the stats of the client of r (Options.Agents), or nil.
func (c *Cluster) agent(r *http.Request) *stats {
	if len(c.byAgent) == 0 {
		return nil
	}
	ua := r.UserAgent()
	for i, a := range c.f.opts.Agents {
		if strings.Contains(ua, a) {
			return &c.byAgent[i]
		}
	}
	return &c.byAgent[len(c.byAgent)-1]
}

// EtcdStats returns the etcd member's counts.
func (c *Cluster) EtcdStats() EtcdStats {
	return EtcdStats{Handshakes: c.etcdHandshakes.Load(), Resumed: c.etcdResumed.Load(), Calls: c.etcdCalls.Load()}
}

// SetEtcdLeaderless makes the member lose (true) or regain (false) its leader.
func (c *Cluster) SetEtcdLeaderless(leaderless bool) {
	c.member.mu.Lock()
	defer c.member.mu.Unlock()
	c.member.leaderless = leaderless
}

// SetEtcdAlarms replaces the member's raised alarms (NOSPACE, CORRUPT).
func (c *Cluster) SetEtcdAlarms(alarms ...pb.AlarmType) {
	c.member.mu.Lock()
	defer c.member.mu.Unlock()
	c.member.alarms = append([]pb.AlarmType(nil), alarms...)
}

// SetNodeReady makes the kubelet report its Node Ready or not, now.
func (c *Cluster) SetNodeReady(ready bool) error {
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	return c.reportStatusLocked(time.Now(), &ready)
}

// Seed writes an object into the cluster directly, as a component of the cluster would (not
// counted as a request). It must be a served kind; its namespace must exist.
func (c *Cluster) Seed(ctx context.Context, obj any) error {
	o := mustObject(obj)
	apiVersion, kind := str(o, "apiVersion"), str(o, "kind")
	var r *resource
	for _, x := range c.res.list {
		if x.apiVersion() == apiVersion && x.kind == kind {
			r = x
		}
	}
	if r == nil {
		return fmt.Errorf("cluster %s does not serve %s %s", c.spec.Name, apiVersion, kind)
	}
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	_, err := c.create(r, str(metadata(o), "namespace"), o)
	return err
}

func mustObject(v any) object {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encoding %T: %v", v, err))
	}
	o, err := decodeObject(b)
	if err != nil {
		panic(fmt.Sprintf("decoding %T: %v", v, err))
	}
	return o
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
