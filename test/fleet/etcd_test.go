package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kairos-capi/kairos-capi/common/pki"
)

// etcdClient connects to a member with etcd's own client, the way the control plane does
// (etcdclient.go: one endpoint, a client certificate of the etcd CA, the server verified
// against the etcd CA).
// Without a dial timeout the client connects lazily; refused clients then fail on their first
// call instead of blocking in New.
func etcdClient(t *testing.T, c *Cluster, cert *pki.KeyPair, serverCA pki.KeyPair, dialTimeout time.Duration) *clientv3.Client {
	t.Helper()
	pair, err := tls.X509KeyPair(cert.Cert, cert.Key)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(serverCA.Cert))
	cl, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{c.EtcdEndpoint()},
		DialTimeout: dialTimeout,
		TLS:         &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, RootCAs: roots},
		Logger:      zap.NewNop(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

func TestEtcdMember(t *testing.T) {
	f := newFleet(t, 5, Options{})
	c, err := f.Add(ClusterSpec{Name: "site-1", Distribution: K3s})
	require.NoError(t, err)
	other, err := f.Add(ClusterSpec{Name: "site-2"})
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(c.EtcdEndpoint(), c.NodeAddress().String()+":2379"), c.EtcdEndpoint())

	cert, err := c.EtcdClientCertificate("kairos-capi-controlplane")
	require.NoError(t, err)
	cl := etcdClient(t, c, cert, c.EtcdCA(), 2*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	list, err := cl.MemberList(ctx)
	require.NoError(t, err)
	require.Len(t, list.Members, 1)
	require.Equal(t, c.EtcdMemberID(), list.Members[0].ID)
	require.Equal(t, c.EtcdMemberName(), list.Members[0].Name)
	require.Equal(t, []string{"https://" + c.NodeAddress().String() + ":2380"}, list.Members[0].PeerURLs)
	_, err = cl.MemberList(ctx, clientv3.WithSerializable())
	require.NoError(t, err)

	st, err := cl.Status(ctx, c.EtcdEndpoint())
	require.NoError(t, err)
	require.Equal(t, c.EtcdMemberID(), st.Header.MemberId)
	require.Equal(t, c.EtcdMemberID(), st.Leader, "a single healthy member leads")
	require.Equal(t, etcdVersion, st.Version)
	require.Empty(t, st.Errors)

	alarms, err := cl.AlarmList(ctx)
	require.NoError(t, err)
	require.Empty(t, alarms.Alarms)
	_, err = cl.Get(ctx, "/kairos-capi/health")
	require.NoError(t, err, "the quorum read")
	_, err = cl.MemberRemove(ctx, c.EtcdMemberID())
	require.ErrorContains(t, err, "not enough started members")

	// The state the simulation controls: an alarm, then a lost leader.
	c.SetEtcdAlarms(pb.AlarmType_NOSPACE)
	alarms, err = cl.AlarmList(ctx)
	require.NoError(t, err)
	require.Len(t, alarms.Alarms, 1)
	require.Equal(t, c.EtcdMemberID(), alarms.Alarms[0].MemberID)
	st, err = cl.Status(ctx, c.EtcdEndpoint())
	require.NoError(t, err)
	require.Len(t, st.Errors, 1)
	c.SetEtcdAlarms()

	c.SetEtcdLeaderless(true)
	st, err = cl.Status(ctx, c.EtcdEndpoint())
	require.NoError(t, err)
	require.Zero(t, st.Leader)
	// etcd answers "no leader" as Unavailable, which etcd's client retries until the call's
	// deadline, as it would against a real member: short deadlines keep the test fast.
	for name, call := range map[string]func(context.Context) error{
		"the quorum read":            func(ctx context.Context) error { _, err := cl.Get(ctx, "/kairos-capi/health"); return err },
		"a linearizable member list": func(ctx context.Context) error { _, err := cl.MemberList(ctx); return err },
	} {
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := call(short)
		cancel()
		require.Error(t, err, name)
	}
	_, err = cl.MemberList(ctx, clientv3.WithSerializable())
	require.NoError(t, err, "a serializable member list needs no leader")
	c.SetEtcdLeaderless(false)
	require.GreaterOrEqual(t, c.EtcdStats().Handshakes, uint64(1))

	// Refused: a client certificate of another cluster's etcd CA, and one of the cluster's own
	// Kubernetes CA; and a client that trusts another etcd CA refuses this member.
	for name, cert := range map[string]func() (*pki.KeyPair, error){
		"another cluster's etcd CA": func() (*pki.KeyPair, error) { return other.EtcdClientCertificate("intruder") },
		"the cluster's own CA":      func() (*pki.KeyPair, error) { return c.ca.client("intruder", nil) },
	} {
		kp, err := cert()
		require.NoError(t, err)
		bad := etcdClient(t, c, kp, c.EtcdCA(), 0)
		short, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		_, err = bad.MemberList(short)
		cancel()
		require.Error(t, err, name)
	}
	wrongTrust := etcdClient(t, c, cert, other.EtcdCA(), 0)
	short, cancel2 := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel2()
	_, err = wrongTrust.Status(short, c.EtcdEndpoint())
	require.Error(t, err)
	// Refused handshakes are handshakes too: the benchmark counts them per member.
	require.GreaterOrEqual(t, c.EtcdStats().Handshakes, uint64(4))
}

// TestEtcdMemberCountsResumedSessions: a client that keeps its TLS sessions (as the control
// plane does per cluster) resumes on its next connection, and the member counts it apart from
// the full handshakes.
func TestEtcdMemberCountsResumedSessions(t *testing.T) {
	f := newFleet(t, 1, Options{})
	c, err := f.Add(ClusterSpec{Name: "site-1"})
	require.NoError(t, err)
	cert, err := c.EtcdClientCertificate("kairos-capi-controlplane")
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(cert.Cert, cert.Key)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(c.EtcdCA().Cert))
	sessions := tls.NewLRUClientSessionCache(4)
	for range 2 {
		cl, err := clientv3.New(clientv3.Config{
			Endpoints: []string{c.EtcdEndpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			TLS: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, RootCAs: roots, ClientSessionCache: sessions},
		})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err = cl.MemberList(ctx, clientv3.WithSerializable())
		cancel()
		require.NoError(t, err)
		require.NoError(t, cl.Close())
	}
	s := c.EtcdStats()
	require.Equal(t, uint64(2), s.Handshakes)
	require.Equal(t, uint64(1), s.Resumed, "the second connection resumes the first one's session")
}
