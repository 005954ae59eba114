package kairosconfig

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/controllers/clustercache"

	"github.com/kairos-capi/kairos-capi/common/token"
)

// Keys of the bootstrap token Secrets read by the Kubernetes bootstrap-token authenticator and
// the k0s join API.
const (
	tokenExpirationKey = "expiration"
	tokenNamespace     = metav1.NamespaceSystem
)

// WorkloadTokens creates and refreshes k0s bootstrap tokens in a workload cluster.
type WorkloadTokens interface {
	// Ready says, without a request, whether tokens can be created in the cluster now: an error
	// that is a clustercache.ErrClusterNotConnected while it is not connected, errConnecting
	// while no connection was tried yet (a manager that just started).
	Ready(ctx context.Context, cluster client.ObjectKey) error
	// Create stores t in the workload cluster, valid for role until expires.
	Create(ctx context.Context, cluster client.ObjectKey, t token.BootstrapToken, role token.K0sTokenRole, expires time.Time) error
	// Refresh moves the expiration of the token with the given id to expires, unless it
	// already expires after keepAfter, and returns the token's expiration afterwards.
	Refresh(ctx context.Context, cluster client.ObjectKey, id string, expires, keepAfter time.Time) (time.Time, error)
}

// clusterCacheTokens reaches workload clusters through CAPI's ClusterCache. It uses the
// uncached client: caching would mean watching every Secret of every workload cluster. Instead
// it remembers the expiration of every token it wrote or read: a token known to expire after
// the refresh window is not read again (the reconciles that follow a token's creation, and
// resyncs, then send nothing); inside the window it is read and refreshed.
type clusterCacheTokens struct {
	cache   clustercache.ClusterCache
	expires *tokenExpirations
}

// tokenExpirations remembers token expirations by cluster and token ID.
type tokenExpirations struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// maxRememberedTokens bounds tokenExpirations; past it the memory starts over (each token is
// then read once more).
const maxRememberedTokens = 100000

func (e *tokenExpirations) key(cluster client.ObjectKey, id string) string {
	return cluster.String() + "/" + id
}

func (e *tokenExpirations) get(cluster client.ObjectKey, id string) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.m[e.key(cluster, id)]
	return t, ok
}

func (e *tokenExpirations) set(cluster client.ObjectKey, id string, t time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil || len(e.m) >= maxRememberedTokens {
		e.m = map[string]time.Time{}
	}
	e.m[e.key(cluster, id)] = t
}

func (e *tokenExpirations) forget(cluster client.ObjectKey, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, e.key(cluster, id))
}

func (c clusterCacheTokens) Ready(ctx context.Context, cluster client.ObjectKey) error {
	_, err := c.cache.GetUncachedClient(ctx, cluster)
	// Client creations count as probes: none yet means the ClusterCache has not tried.
	if errors.Is(err, clustercache.ErrClusterNotConnected) && c.cache.GetHealthCheckingState(ctx, cluster).LastProbeTime.IsZero() {
		return errConnecting
	}
	return err
}

// errConnecting is Ready's answer while the ClusterCache has not tried to connect to the
// workload cluster yet: a manager that just started. It is a clustercache.ErrClusterNotConnected.
var errConnecting = fmt.Errorf("%w: no connection attempt yet", clustercache.ErrClusterNotConnected)

func (c clusterCacheTokens) Create(ctx context.Context, cluster client.ObjectKey, t token.BootstrapToken, role token.K0sTokenRole, expires time.Time) error {
	remote, err := c.cache.GetUncachedClient(ctx, cluster)
	if err != nil {
		return err
	}
	s, err := bootstrapTokenSecret(t, role, expires)
	if err != nil {
		return err
	}
	if err := remote.Create(ctx, s); err != nil {
		return err
	}
	c.expires.set(cluster, t.ID, expires.Truncate(time.Second))
	return nil
}

func (c clusterCacheTokens) Refresh(ctx context.Context, cluster client.ObjectKey, id string, expires, keepAfter time.Time) (time.Time, error) {
	remote, err := c.cache.GetUncachedClient(ctx, cluster)
	if err != nil {
		return time.Time{}, err
	}
	if known, ok := c.expires.get(cluster, id); ok && known.After(keepAfter) {
		return known, nil
	}
	s := &corev1.Secret{}
	if err := remote.Get(ctx, client.ObjectKey{Namespace: tokenNamespace, Name: bootstrapTokenSecretName(id)}, s); err != nil {
		if apierrors.IsNotFound(err) {
			c.expires.forget(cluster, id)
		}
		return time.Time{}, err
	}
	// A token far from expiring is left alone, as Cluster API's kubeadm provider does
	// (skipTokenRefreshIfExpiringAfter): resyncs and repeated reconciles then write nothing.
	if current, err := time.Parse(time.RFC3339, string(s.Data[tokenExpirationKey])); err == nil && current.After(keepAfter) {
		c.expires.set(cluster, id, current)
		return current, nil
	}
	patch := client.MergeFrom(s.DeepCopy())
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[tokenExpirationKey] = []byte(expires.UTC().Format(time.RFC3339))
	if err := remote.Patch(ctx, s, patch); err != nil {
		return time.Time{}, err
	}
	c.expires.set(cluster, id, expires.Truncate(time.Second))
	return expires, nil
}

func bootstrapTokenSecretName(id string) string { return token.BootstrapToken{ID: id}.SecretName() }

func bootstrapTokenSecret(t token.BootstrapToken, role token.K0sTokenRole, expires time.Time) (*corev1.Secret, error) {
	data, err := token.K0sBootstrapTokenSecretData(role, t, expires)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: tokenNamespace, Name: t.SecretName()},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: data,
	}, nil
}

// tokenExpiry returns when a token created or refreshed now should expire.
func (r *Reconciler) tokenExpiry() time.Time { return r.Now().Add(r.TokenTTL) }

// tokenKeepAfter is the expiration beyond which a token needs no refresh yet: 5/6 of the TTL
// ahead, Cluster API's kubeadm provider's threshold. The refresh interval (a third of the TTL)
// then refreshes a needed token once per interval, and resyncs in between write nothing.
func (r *Reconciler) tokenKeepAfter() time.Time { return r.Now().Add(r.TokenTTL * 5 / 6) }

// tokenRefreshInterval is how often a token still needed is refreshed: well inside its TTL so
// that one missed reconcile does not let it lapse.
func (r *Reconciler) tokenRefreshInterval() time.Duration { return r.TokenTTL / 3 }

func describeTokenErr(err error) string {
	return fmt.Sprintf("cannot reach the workload cluster to create a join token: %v", err)
}
