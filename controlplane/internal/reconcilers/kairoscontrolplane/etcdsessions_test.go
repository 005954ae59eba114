package kairoscontrolplane

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kairos-capi/kairos-capi/common/pki"
)

// tlsMember is a TLS server that checks client certificates as an etcd member does
// (--client-cert-auth with the cluster's etcd CA), and tells for each connection whether it
// resumed an earlier session.
type tlsMember struct {
	l       net.Listener
	resumed chan bool
}

func newTLSMember(t *testing.T, ca *pki.KeyPair) *tlsMember {
	t.Helper()
	serving, err := ca.SignServer("etcd", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(serving.Cert, serving.Key)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := pki.ParseCertificate(ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(caCert)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients,
	})
	if err != nil {
		t.Fatal(err)
	}
	m := &tlsMember{l: l, resumed: make(chan bool, 8)}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if tc.Handshake() == nil {
				m.resumed <- tc.ConnectionState().DidResume
				// A byte after the handshake: the client reads the session ticket before it.
				_, _ = tc.Write([]byte{1})
			}
			_ = tc.Close()
		}
	}()
	return m
}

// connect dials the member with the TLS configuration a reconciliation's dialer uses, and
// returns whether the member saw a resumed session.
func (m *tlsMember) connect(t *testing.T, factory etcdDialerFactory, cluster string, ca *pki.KeyPair) bool {
	t.Helper()
	d, err := factory(types.UID(cluster), ca)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", m.l.Addr().String(), d.(*grpcEtcdDialer).tls.Clone())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	select {
	case r := <-m.resumed:
		return r
	case <-time.After(time.Minute):
		t.Fatal("the member saw no handshake")
		return false
	}
}

// TestEtcdSessionsAreResumed: each reconciliation dials the members anew; the second
// reconciliation of a cluster resumes the TLS session the first one made (no full handshake on
// either end), while another cluster's, or the same cluster's after its etcd CA changed, makes
// its own.
func TestEtcdSessionsAreResumed(t *testing.T) {
	ca, err := pki.NewCA("etcd-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	member := newTLSMember(t, ca)
	factory := newEtcdDialerFactory(testContext(t))
	if member.connect(t, factory, "cluster-a", ca) {
		t.Fatal("the first connection resumed a session nobody made")
	}
	if !member.connect(t, factory, "cluster-a", ca) {
		t.Error("the next reconciliation made a full handshake instead of resuming the session")
	}
	if member.connect(t, factory, "cluster-b", ca) {
		t.Error("another cluster resumed cluster-a's session")
	}

	// The cluster's etcd CA is replaced while the member keeps its certificate of the old one:
	// the controller, which now trusts the new CA alone, refuses the member, whether a session
	// of the old CA could have been resumed or not (VerifyConnection runs on both).
	rotated, err := pki.NewCA("etcd-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	d, err := factory(types.UID("cluster-a"), rotated)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := tls.Dial("tcp", member.l.Addr().String(), d.(*grpcEtcdDialer).tls.Clone()); err == nil {
		_ = c.Close()
		t.Error("a member whose certificate the new etcd CA did not sign was trusted")
	}
}
