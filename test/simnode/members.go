package simnode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"gopkg.in/yaml.v3"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
)

// Every simulated control-plane node runs its own real etcd member (the envtest etcd binary),
// as k0s and k3s servers do:
//
//   - peers talk TLS on https://<node address>:2380 (k0s: storage.etcd.peerAddress defaults to
//     the node address, k0s pkg/component/controller/etcd.go; k3s: pkg/etcd/etcd.go peerURL);
//   - clients: k3s listens on the node's loopback and address, port 2379 (k3s pkg/etcd/etcd.go,
//     listenClientURLs); k0s on 127.0.0.1:2379 only, unless the ClusterConfig's
//     storage.etcd.extraArgs override listen-client-urls (k0s pkg/component/controller/etcd.go
//     applies extraArgs over its own). A node's loopback is its own, so the simulation serves
//     each node's "127.0.0.1:2379" at <node address>:12379, which nothing outside the node
//     uses but the cluster's API server;
//   - certificates are signed by the etcd CA the node was given (k0s etcd/ca.*, k3s
//     etcd/server-ca.* and peer-ca.*), client certificates are required on both ports;
//   - a joining server is added with a real member add through a member that answers (k0s'
//     join API adds a voting member; k3s adds a learner and promotes it once it caught up,
//     k3s pkg/etcd/etcd.go), then started with the existing cluster as initial cluster;
//   - a member leaves with a real member remove, after which its etcd exits by itself.
//
// The cluster's one API server reaches etcd through a balancer that connects to any member
// process that accepts connections, standing for "every node's API server talks to its own
// member": it fails when etcd loses quorum, as a real control plane does.

const (
	etcdPeerPort   = 2380
	etcdClientPort = 2379
	// The node's private listeners: its "127.0.0.1:2379" and the member's own peer listener
	// behind the peer proxy. They sit on the node's address at fixed ports below the kernel's
	// ephemeral range, so that no outgoing connection can take them while the member is down.
	// A port picked with :0 and bound again at each start could be taken, and the member then
	// failed to bind it at every retry (the likeliest cause of a CI failure where a k0s member
	// was added on scale-up but never started).
	etcdLocalClientPort = 12379
	etcdLocalPeerPort   = 12380
)

// etcdServer is the etcd member a simulated control-plane node runs.
type etcdServer struct {
	node  *Node
	name  string
	dir   string
	ca    pki.KeyPair
	ip    string
	local string // the node's own loopback client address (host:port)
	// peerLocal is the member's private peer listener; its peer address is a proxy in front of
	// it (network.go), so that a test can partition the member.
	peerLocal string
	proxy     *peerProxy
	exposed   bool // also serves clients at <ip>:2379
	learner   bool // joined as a learner (k3s), until promoted

	mu      sync.Mutex
	proc    *process
	args    []string
	removed bool // removed from the cluster: its etcd has exited for good
}

func (e *etcdServer) peerURL() string {
	return "https://" + net.JoinHostPort(e.ip, strconv.Itoa(etcdPeerPort))
}

// running tells whether the member's process runs.
func (e *etcdServer) running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proc != nil && !e.proc.exited()
}

// newEtcdServer prepares a node's etcd member: certificates and data directory below its root.
func newEtcdServer(n *Node, name string, ca pki.KeyPair, exposed bool) (*etcdServer, error) {
	e := &etcdServer{
		node: n, name: name, ca: ca, ip: n.ip, exposed: exposed,
		dir:       filepath.Join(n.root, "var", "lib", "sim-etcd"),
		local:     net.JoinHostPort(n.ip, strconv.Itoa(etcdLocalClientPort)),
		peerLocal: net.JoinHostPort(n.ip, strconv.Itoa(etcdLocalPeerPort)),
	}
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return nil, err
	}
	sans := []string{n.ip, "127.0.0.1", "localhost", name}
	for file, usages := range map[string][]x509.ExtKeyUsage{
		"server": {x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		"peer":   {x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	} {
		crt, key, err := issue(ca, name, sans, usages)
		if err != nil {
			return nil, fmt.Errorf("issuing the etcd %s certificate: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(e.dir, file+".crt"), crt, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(e.dir, file+".key"), key, 0o600); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(e.dir, "ca.crt"), ca.Cert, 0o600); err != nil {
		return nil, err
	}
	return e, nil
}

// start runs the member with initialCluster ("name=peerURL,...") in state "new" or "existing".
func (e *etcdServer) start(initialCluster, state string) error {
	clientURLs := "https://" + e.local
	advertise := "https://127.0.0.1:2379" // what k0s advertises; nobody dials it
	if e.exposed {
		clientURLs += ",https://" + net.JoinHostPort(e.ip, strconv.Itoa(etcdClientPort))
		advertise = "https://" + net.JoinHostPort(e.ip, strconv.Itoa(etcdClientPort))
	}
	f := func(name string) string { return filepath.Join(e.dir, name) }
	e.mu.Lock()
	e.args = []string{
		"--name=" + e.name,
		"--data-dir=" + f("data"),
		"--listen-peer-urls=https://" + e.peerLocal,
		"--initial-advertise-peer-urls=" + e.peerURL(),
		"--listen-client-urls=" + clientURLs,
		"--advertise-client-urls=" + advertise,
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-state=" + state,
		"--cert-file=" + f("server.crt"), "--key-file=" + f("server.key"),
		"--trusted-ca-file=" + f("ca.crt"), "--client-cert-auth=true",
		"--peer-cert-file=" + f("peer.crt"), "--peer-key-file=" + f("peer.key"),
		"--peer-trusted-ca-file=" + f("ca.crt"), "--peer-client-cert-auth=true",
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
	e.mu.Unlock()
	return e.run()
}

func (e *etcdServer) run() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.proc != nil && !e.proc.exited() {
		return nil
	}
	if e.proxy == nil {
		cert, err := tls.LoadX509KeyPair(filepath.Join(e.dir, "peer.crt"), filepath.Join(e.dir, "peer.key"))
		if err != nil {
			return fmt.Errorf("loading the etcd peer certificate: %w", err)
		}
		proxy, err := newPeerProxy(&e.node.reg.peers, e.key(), net.JoinHostPort(e.ip, strconv.Itoa(etcdPeerPort)), e.peerLocal, cert, e.ca.Cert)
		if err != nil {
			return fmt.Errorf("listening on the etcd peer address: %w", err)
		}
		e.proxy = proxy
	}
	p, err := startProcess(e.dir, "etcd", filepath.Join(e.node.reg.assets, "etcd"), e.args)
	if err != nil {
		return err
	}
	e.proc = p
	return nil
}

// waitServing waits until the member's loopback client port accepts connections.
func (e *etcdServer) waitServing(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		e.mu.Lock()
		p := e.proc
		e.mu.Unlock()
		if p == nil || p.exited() {
			return fmt.Errorf("etcd of %s exited: %s", e.name, p.logTail(10))
		}
		if conn, err := net.DialTimeout("tcp", e.local, 200*time.Millisecond); err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("etcd of %s does not accept connections after %s", e.name, timeout)
}

// kill stops the member's process at once.
func (e *etcdServer) kill() { e.stop(0) }

// stop ends the member's process: with SIGTERM and up to grace to end (SIGKILL then), as an
// init system stops a service, or at once (grace 0), as a crash or a power cut does. A leader
// that stops on SIGTERM hands its leadership to a peer first (etcd v3.6 etcdmain's interrupt
// handler closes the embedded server, and etcdserver's Stop "transfers its leadership to one of
// its peers"); a killed one does not, and its peers elect a new one after an election timeout.
func (e *etcdServer) stop(grace time.Duration) {
	e.mu.Lock()
	p := e.proc
	e.mu.Unlock()
	p.stop(grace)
}

// shutdown stops the member (see stop) and stops listening on its peer address: its machine is
// off.
func (e *etcdServer) shutdown(grace time.Duration) {
	e.stop(grace)
	e.mu.Lock()
	proxy := e.proxy
	e.proxy = nil
	e.mu.Unlock()
	if proxy != nil {
		proxy.close()
	}
}

// key names the member in the registry's peer network.
func (e *etcdServer) key() memberKey { return memberKey{ca: string(e.ca.Cert), name: e.name} }

// issue signs an ECDSA certificate with the etcd CA (ECDSA keys: the simulation issues many).
func issue(ca pki.KeyPair, cn string, sans []string, usages []x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	caCert, caKey, err := pki.ParseKeyPair(ca)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usages,
	}
	for _, s := range sans {
		if ip := net.ParseIP(s); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, s)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// k0sServesEtcdOnNodeAddress tells whether a k0s controller's ClusterConfig makes etcd listen
// for clients on the node's address: k0s applies storage.etcd.extraArgs over its own
// --listen-client-urls=https://127.0.0.1:2379.
func k0sServesEtcdOnNodeAddress(p *plan, ip string) (bool, error) {
	data, ok := p.files["/etc/k0s/k0s.yaml"]
	if !ok {
		return false, nil
	}
	var cfg struct {
		Spec struct {
			Storage struct {
				Etcd struct {
					ExtraArgs map[string]string `yaml:"extraArgs"`
				} `yaml:"etcd"`
			} `yaml:"storage"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		return false, refuse(ReasonBootstrapDataRefused, "/etc/k0s/k0s.yaml: %v", err)
	}
	urls := cfg.Spec.Storage.Etcd.ExtraArgs["listen-client-urls"]
	for _, raw := range strings.Split(urls, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Host == "" {
			continue
		}
		if h := u.Hostname(); (h == "0.0.0.0" || h == ip) && u.Port() == strconv.Itoa(etcdClientPort) {
			return true, nil
		}
	}
	return false, nil
}

// etcdBalancer is the cluster API server's way to etcd: each connection goes to a member
// process that accepts it.
type etcdBalancer struct {
	l       net.Listener
	members func() []string
	next    int
	mu      sync.Mutex
	conns   map[net.Conn]string // open connection -> the member address it goes to
	closed  bool
}

func newEtcdBalancer(members func() []string) (*etcdBalancer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &etcdBalancer{l: l, members: members, conns: map[net.Conn]string{}}
	go b.serve()
	return b, nil
}

func (b *etcdBalancer) addr() string { return b.l.Addr().String() }

func (b *etcdBalancer) serve() {
	for {
		c, err := b.l.Accept()
		if err != nil {
			return
		}
		go b.forward(c)
	}
}

func (b *etcdBalancer) forward(c net.Conn) {
	members := b.members()
	b.mu.Lock()
	start := b.next
	b.next++
	b.mu.Unlock()
	var backend net.Conn
	var target string
	for i := range members {
		target = members[(start+i)%len(members)]
		conn, err := net.DialTimeout("tcp", target, 300*time.Millisecond)
		if err == nil {
			backend = conn
			break
		}
	}
	if backend == nil || !b.track(target, c, backend) {
		_ = c.Close()
		if backend != nil {
			_ = backend.Close()
		}
		return
	}
	pipe(c, backend)
	b.untrack(c, backend)
}

func (b *etcdBalancer) track(target string, conns ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	for _, c := range conns {
		b.conns[c] = target
	}
	return true
}

// breakTo closes the open connections to one member.
func (b *etcdBalancer) breakTo(target string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c, t := range b.conns {
		if t == target {
			_ = c.Close()
		}
	}
}

func (b *etcdBalancer) untrack(conns ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range conns {
		delete(b.conns, c)
	}
}

func (b *etcdBalancer) close() {
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	_ = b.l.Close()
}

// etcdClient is a client of the cluster's etcd through the balancer, with a client certificate
// of the cluster's etcd CA: what k0s' join API and k3s' supervisor use to add and remove members.
func (c *Cluster) etcdClient() (*clientv3.Client, error) {
	c.etcdClientOnce.Do(func() {
		crt, key, err := issue(c.pki.etcdCA, "kairos-sim-etcd-admin", nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
		if err != nil {
			c.etcdClientErr = err
			return
		}
		pair, err := tls.X509KeyPair(crt, key)
		if err != nil {
			c.etcdClientErr = err
			return
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(c.pki.etcdCA.Cert)
		c.etcdCli, c.etcdClientErr = clientv3.New(clientv3.Config{
			Endpoints:   []string{"https://" + c.etcdLB.addr()},
			DialTimeout: 3 * time.Second,
			TLS:         &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: []tls.Certificate{pair}, ServerName: "127.0.0.1"},
			Logger:      zap.NewNop(),
		})
	})
	return c.etcdCli, c.etcdClientErr
}

// memberServers returns the loopback client addresses of the members whose process runs.
func (c *Cluster) memberServers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.servers {
		// A partitioned member's API server fails its /readyz etcd check, and a load balancer
		// health-checking the API servers stops sending it requests: the cluster's one API
		// server stands for all of them, so it stops using that member.
		if e.running() && !c.reg.peers.isCut(e.key()) {
			out = append(out, e.local)
		}
	}
	sort.Strings(out)
	return out
}

// addServer records a node's etcd member in the cluster.
func (c *Cluster) addServer(e *etcdServer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servers[e.name] = e
}

// joinEtcd adds a joining server's member with a real member add (as a learner for k3s), starts
// its etcd with the existing cluster, and promotes a learner once it caught up.
func (c *Cluster) joinEtcd(ctx context.Context, e *etcdServer) error {
	cli, err := c.etcdClient()
	if err != nil {
		return err
	}
	if existing := c.server(e.name); existing != nil {
		// The node's own member already: a restart (a retried boot) keeps its data. Waited on as
		// a first start is, so that a member that exits says why in the node's condition.
		if err := existing.run(); err != nil {
			return err
		}
		return existing.waitServing(ctx, 30*time.Second)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var resp *clientv3.MemberAddResponse
	if c.distribution == render.K3s {
		resp, err = cli.MemberAddAsLearner(actx, []string{e.peerURL()})
		e.learner = true
	} else {
		resp, err = cli.MemberAdd(actx, []string{e.peerURL()})
	}
	if err != nil {
		return fmt.Errorf("adding the etcd member: %w", err)
	}
	var initial []string
	for _, m := range resp.Members {
		switch {
		case m.ID == resp.Member.ID:
			initial = append(initial, e.name+"="+e.peerURL())
		case m.Name != "":
			for _, u := range m.PeerURLs {
				initial = append(initial, m.Name+"="+u)
			}
		}
	}
	if err := e.start(strings.Join(initial, ","), "existing"); err != nil {
		return err
	}
	c.addServer(e)
	if err := e.waitServing(ctx, 30*time.Second); err != nil {
		return err
	}
	if !e.learner {
		return nil
	}
	// A learner is promoted once it is in sync with the leader; etcd refuses before.
	deadline := time.Now().Add(time.Minute)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cli.MemberPromote(pctx, resp.Member.ID)
		cancel()
		if err == nil {
			e.learner = false
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("promoting the etcd learner %s: %w", e.name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Cluster) server(name string) *etcdServer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[name]
}

// removeEtcdMember removes a member by name with a real member remove; its etcd exits.
func (c *Cluster) removeEtcdMember(ctx context.Context, name string) error {
	cli, err := c.etcdClient()
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := cli.MemberList(rctx)
	if err != nil {
		return fmt.Errorf("listing etcd members: %w", err)
	}
	for _, m := range list.Members {
		if m.Name != name {
			continue
		}
		if _, err := cli.MemberRemove(rctx, m.ID); err != nil {
			return fmt.Errorf("removing etcd member %s: %w", name, err)
		}
		if e := c.server(name); e != nil {
			e.mu.Lock()
			e.removed = true
			e.mu.Unlock()
		}
		return nil
	}
	return nil // not (or no more) a member
}

// etcdMembers reads etcd's member list.
func (c *Cluster) etcdMembers(ctx context.Context) ([]EtcdMember, error) {
	cli, err := c.etcdClient()
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := cli.MemberList(lctx)
	if err != nil {
		return nil, err
	}
	var out []EtcdMember
	for _, m := range list.Members {
		mem := EtcdMember{Name: m.Name, MemberID: strconv.FormatUint(m.ID, 16), IsLearner: m.IsLearner}
		for _, u := range m.PeerURLs {
			if pu, err := url.Parse(u); err == nil {
				mem.PeerAddress = pu.Hostname()
			}
		}
		if e := c.server(m.Name); e != nil {
			mem.NodeName = e.node.Name()
		}
		out = append(out, mem)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

var errNoEtcd = errors.New("the node runs no etcd member")
