package kairoscontrolplane

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/cluster-api/util/cache"

	"github.com/kairos-capi/kairos-capi/common/pki"
	"github.com/kairos-capi/kairos-capi/common/render"
)

// The control plane reads etcd's health from the members themselves: every control-plane node
// serves etcd's client API on its own addresses at render.EtcdClientPort (k3s by default, k0s
// through the ClusterConfig the renderer writes), with client certificates of the cluster's
// etcd CA, which the management cluster owns (<cluster>-etcd). Distribution objects (k0s
// EtcdMember, k3s Node annotations) say what the distribution did, not whether a member works:
// k0s keeps Joined=True on a member that is down, and a kubelet can be Ready while its etcd is
// dead.

const (
	// etcdDialTimeout bounds connecting to one member; etcdCallTimeout one call to it.
	etcdDialTimeout = 3 * time.Second
	etcdCallTimeout = 3 * time.Second
	// etcdClientCertValidity is the lifetime of the controller's etcd client certificate;
	// it is renewed when less than etcdClientCertRenewBefore is left.
	etcdClientCertValidity    = 2 * time.Hour
	etcdClientCertRenewBefore = 30 * time.Minute
	// etcdClientCertCacheTTL is how long a signed certificate is reused: until it is due for
	// renewal.
	etcdClientCertCacheTTL = etcdClientCertValidity - etcdClientCertRenewBefore
	// etcdClientCommonName is who the controller is to etcd.
	etcdClientCommonName = "kairos-capi-controlplane"
)

// etcdEndpoint is one member's client API.
type etcdEndpoint interface {
	// Status is the member's own view: its ID, the leader it follows, whether it is a learner,
	// and the errors it reports (alarms among them). It is answered by the member alone.
	Status(ctx context.Context) (*clientv3.StatusResponse, error)
	// MemberList is etcd's membership, read with quorum, or, when linearizable is false, as this
	// member last knew it (no quorum needed).
	MemberList(ctx context.Context, linearizable bool) ([]*etcdserverpb.Member, error)
	// AlarmList lists the alarms raised in the cluster (NOSPACE, CORRUPT).
	AlarmList(ctx context.Context) ([]*etcdserverpb.AlarmMember, error)
	// QuorumRead performs a linearizable read, which only succeeds when the member reaches a
	// leader that has quorum (what etcdctl endpoint health does).
	QuorumRead(ctx context.Context) error
	// MemberRemove removes a member from the cluster.
	MemberRemove(ctx context.Context, id uint64) error
	Close() error
}

// etcdDialer connects to the etcd client API at an address (host only: the port is
// render.EtcdClientPort).
type etcdDialer interface {
	Dial(ctx context.Context, host string) (etcdEndpoint, error)
}

// etcdDialerFactory returns the dialer for a cluster, given its etcd CA.
type etcdDialerFactory func(clusterUID types.UID, ca *pki.KeyPair) (etcdDialer, error)

// etcdClientCerts caches the controller's etcd client certificate per cluster and etcd CA:
// signing one costs an RSA key, and every reconciliation of every control plane needs one. An
// entry expires when its certificate is due for renewal, so the entries of deleted clusters
// (and of rotated CAs) go too.
type etcdClientCerts struct {
	entries cache.Cache[etcdClientCert]
}

type etcdClientCert struct {
	key  string
	cert tls.Certificate
	// sessions keeps the TLS sessions of the cluster's members for as long as the certificate
	// lives: each reconciliation dials every member anew (see grpcEtcdDialer), and a resumed
	// session spares both ends the full handshake (the member's and the controller's RSA
	// signatures, and each verifying the other's chain), which the fleet benchmark counted
	// three times per cluster per resync. A session belongs to the certificate it was made
	// with: a rotated CA gets a new entry, and so new sessions.
	sessions tls.ClientSessionCache
}

// etcdSessionsPerCluster holds a session for each member of the largest control plane the
// webhook admits, and the addresses of a few replaced ones.
const etcdSessionsPerCluster = 16

func (e etcdClientCert) Key() string { return e.key }

// newEtcdClientCerts returns a cache whose entries live for ttl: etcdClientCertCacheTTL, or
// shorter in tests.
func newEtcdClientCerts(ctx context.Context, ttl time.Duration) *etcdClientCerts {
	return &etcdClientCerts{entries: cache.New[etcdClientCert](ctx, ttl)}
}

func (c *etcdClientCerts) get(clusterUID types.UID, ca *pki.KeyPair) (etcdClientCert, error) {
	sum := sha256.Sum256(ca.Cert)
	key := string(clusterUID) + "/" + hex.EncodeToString(sum[:])
	if e, ok := c.entries.Has(key); ok {
		return e, nil
	}
	kp, err := ca.SignClient(etcdClientCommonName, nil, etcdClientCertValidity)
	if err != nil {
		return etcdClientCert{}, fmt.Errorf("signing the etcd client certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(kp.Cert, kp.Key)
	if err != nil {
		return etcdClientCert{}, fmt.Errorf("loading the etcd client certificate: %w", err)
	}
	e := etcdClientCert{key: key, cert: cert, sessions: tls.NewLRUClientSessionCache(etcdSessionsPerCluster)}
	c.entries.Add(e)
	return e, nil
}

// newEtcdDialerFactory returns the production dialer factory, sharing one certificate cache.
func newEtcdDialerFactory(ctx context.Context) etcdDialerFactory {
	certs := newEtcdClientCerts(ctx, etcdClientCertCacheTTL)
	return func(clusterUID types.UID, ca *pki.KeyPair) (etcdDialer, error) {
		client, err := certs.get(clusterUID, ca)
		if err != nil {
			return nil, err
		}
		caCert, err := pki.ParseCertificate(ca.Cert)
		if err != nil {
			return nil, fmt.Errorf("reading the etcd CA: %w", err)
		}
		tlsConfig := etcdTLSConfig(client.cert, caCert)
		tlsConfig.ClientSessionCache = client.sessions
		return &grpcEtcdDialer{tls: tlsConfig}, nil
	}
}

// etcdTLSConfig trusts exactly the servers whose certificate the cluster's etcd CA signed.
// Host names are not checked: k0s signs its etcd server certificate for 127.0.0.1 and localhost
// only (k0s pkg/component/controller/etcd.go, setupCerts), so a member reached at its node
// address never matches by name; only the cluster's own CA, which nobody else holds, can have
// signed the certificate. The check runs on resumed sessions too (crypto/tls calls
// VerifyConnection on every handshake, with the certificates the session was made with), so a
// resumed session is trusted exactly as the full handshake that made it was.
func etcdTLSConfig(cert tls.Certificate, ca *x509.Certificate) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		Certificates:       []tls.Certificate{cert},
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection against the cluster's etcd CA
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the etcd server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if err != nil {
				return fmt.Errorf("the etcd server certificate is not signed by the cluster's etcd CA: %w", err)
			}
			return nil
		},
	}
}

type grpcEtcdDialer struct{ tls *tls.Config }

func (d *grpcEtcdDialer) Dial(ctx context.Context, host string) (etcdEndpoint, error) {
	endpoint := "https://" + net.JoinHostPort(host, strconv.Itoa(render.EtcdClientPort))
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: etcdDialTimeout,
		TLS:         d.tls.Clone(),
		Logger:      zap.NewNop(),
		Context:     ctx,
		// One endpoint, no discovery: the answer must come from this member.
		AutoSyncInterval: 0,
		RejectOldCluster: false,
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd at %s: %w", endpoint, err)
	}
	return &grpcEtcdEndpoint{c: c, endpoint: endpoint}, nil
}

type grpcEtcdEndpoint struct {
	c        *clientv3.Client
	endpoint string
}

func (e *grpcEtcdEndpoint) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, etcdCallTimeout)
}

func (e *grpcEtcdEndpoint) Status(ctx context.Context) (*clientv3.StatusResponse, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	return e.c.Status(ctx, e.endpoint)
}

func (e *grpcEtcdEndpoint) MemberList(ctx context.Context, linearizable bool) ([]*etcdserverpb.Member, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	var opts []clientv3.OpOption
	if !linearizable {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := e.c.MemberList(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return resp.Members, nil
}

func (e *grpcEtcdEndpoint) AlarmList(ctx context.Context) ([]*etcdserverpb.AlarmMember, error) {
	ctx, cancel := e.call(ctx)
	defer cancel()
	resp, err := e.c.AlarmList(ctx)
	if err != nil {
		return nil, err
	}
	return resp.Alarms, nil
}

func (e *grpcEtcdEndpoint) QuorumRead(ctx context.Context) error {
	ctx, cancel := e.call(ctx)
	defer cancel()
	// A key nobody writes: the answer does not matter, only that a linearizable read succeeds.
	_, err := e.c.Get(ctx, "/kairos-capi/health")
	return err
}

func (e *grpcEtcdEndpoint) MemberRemove(ctx context.Context, id uint64) error {
	ctx, cancel := e.call(ctx)
	defer cancel()
	_, err := e.c.MemberRemove(ctx, id)
	return err
}

func (e *grpcEtcdEndpoint) Close() error { return e.c.Close() }
