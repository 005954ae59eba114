package simnode

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The simulated network between etcd members. Every member dials its peers from 127.0.0.1, so
// the kernel cannot tell which node a peer connection comes from; instead, each member's peer
// address (<node address>:2380, what it advertises and what its peers dial) is a TLS proxy in
// front of the member's private peer listener. The proxy requires the dialing member's peer
// certificate, whose common name is the member's name, and forwards to the member with the
// member's own certificate. A partitioned member's proxy refuses everyone and every other proxy
// refuses it, so no raft message crosses in either direction: the member keeps running and
// answering local clients, exactly as behind a firewall that drops the peer port.

// memberKey names a member across the registry: the etcd CA tells the clusters apart, as two
// clusters may have members of the same name.
type memberKey struct {
	ca   string
	name string
}

// peerNet is the network of a registry's etcd members.
type peerNet struct {
	mu      sync.Mutex
	cut     map[memberKey]bool
	proxies map[*peerProxy]struct{}
}

func (n *peerNet) isCut(k memberKey) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[k]
}

// setCut partitions a member off its peers (or heals it); a new partition also breaks the
// connections already open from or to it.
func (n *peerNet) setCut(k memberKey, cut bool) {
	n.mu.Lock()
	if n.cut == nil {
		n.cut = map[memberKey]bool{}
	}
	n.cut[k] = cut
	var proxies []*peerProxy
	for p := range n.proxies {
		if p.key.ca == k.ca {
			proxies = append(proxies, p)
		}
	}
	n.mu.Unlock()
	if cut {
		for _, p := range proxies {
			p.breakConns(k.name)
		}
	}
}

func (n *peerNet) add(p *peerProxy) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proxies == nil {
		n.proxies = map[*peerProxy]struct{}{}
	}
	n.proxies[p] = struct{}{}
}

func (n *peerNet) remove(p *peerProxy) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.proxies, p)
}

// peerProxy is a member's peer address.
type peerProxy struct {
	key    memberKey // the member behind it
	net    *peerNet
	l      net.Listener
	target string // the member's private peer listener
	client *tls.Config

	mu    sync.Mutex
	conns map[net.Conn]string // open connection -> the member that dialed it
}

// newPeerProxy listens on addr with the member's peer certificate and forwards to target.
func newPeerProxy(pn *peerNet, key memberKey, addr, target string, cert tls.Certificate, ca []byte) (*peerProxy, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the etcd CA holds no certificate")
	}
	// The proxy stands for the network between members, so it only adds handshakes that a
	// real network does not: etcd's peer prober opens a new connection every few seconds
	// (rafthttp's stream round tripper keeps no idle connections), and each one costs the
	// proxy a handshake on either side. Those two handshakes use X25519 alone (not Go's
	// default hybrid with ML-KEM) and the one towards the member resumes its session: the
	// dialing member's certificate is still checked on every connection, and the member
	// behind the proxy still checks the proxy's. Measured: the proxies' handshakes were 9 %
	// of the lifecycle test binary's CPU time.
	curves := []tls.CurveID{tls.X25519}
	l, err := tls.Listen("tcp", addr, &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots, CurvePreferences: curves,
	})
	if err != nil {
		return nil, err
	}
	p := &peerProxy{key: key, net: pn, l: l, target: target, conns: map[net.Conn]string{},
		client: &tls.Config{
			MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: roots, ServerName: "127.0.0.1",
			CurvePreferences: curves, ClientSessionCache: tls.NewLRUClientSessionCache(8),
		}}
	pn.add(p)
	go p.serve()
	return p, nil
}

func (p *peerProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.forward(c.(*tls.Conn))
	}
}

func (p *peerProxy) forward(c *tls.Conn) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	from := c.ConnectionState().PeerCertificates[0].Subject.CommonName
	cut := func() bool { return p.net.isCut(memberKey{ca: p.key.ca, name: from}) || p.net.isCut(p.key) }
	if cut() {
		_ = c.Close()
		return
	}
	backend, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", p.target, p.client)
	if err != nil {
		_ = c.Close()
		return
	}
	// Checked again together with the registration that breakConns reads: a partition made
	// while this connection was being set up (its handshake and dial take a while on a loaded
	// machine) must not leave it open, or a member cut off would keep talking to its peers
	// (TestEtcdMembersAreReal/k3s saw writes go on with two of three members partitioned).
	p.mu.Lock()
	if cut() {
		p.mu.Unlock()
		_ = c.Close()
		_ = backend.Close()
		return
	}
	p.conns[c], p.conns[backend] = from, from
	p.mu.Unlock()
	pipe(c, backend)
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, backend)
	p.mu.Unlock()
}

// breakConns closes the open connections from or to a member that was just partitioned.
func (p *peerProxy) breakConns(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, from := range p.conns {
		if from == name || p.key.name == name {
			_ = c.Close()
		}
	}
}

// close stops listening and breaks every open connection: the machine is off.
func (p *peerProxy) close() {
	p.net.remove(p)
	_ = p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(a, b); done <- struct{}{} }()
	go func() { _, _ = io.Copy(b, a); done <- struct{}{} }()
	<-done
	_ = a.Close()
	_ = b.Close()
}
