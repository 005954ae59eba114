package kairosconfig

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// Create stores t in the workload cluster, valid for role until expires.
	Create(ctx context.Context, cluster client.ObjectKey, t token.BootstrapToken, role token.K0sTokenRole, expires time.Time) error
	// Refresh moves the expiration of the token with the given id to expires, unless it
	// already expires after keepAfter, and returns the token's expiration afterwards.
	Refresh(ctx context.Context, cluster client.ObjectKey, id string, expires, keepAfter time.Time) (time.Time, error)
}

// clusterCacheTokens reaches workload clusters through CAPI's ClusterCache. It uses the
// uncached client: caching would mean watching every Secret of every workload cluster.
type clusterCacheTokens struct {
	cache clustercache.ClusterCache
}

func (c clusterCacheTokens) Create(ctx context.Context, cluster client.ObjectKey, t token.BootstrapToken, role token.K0sTokenRole, expires time.Time) error {
	remote, err := c.cache.GetUncachedClient(ctx, cluster)
	if err != nil {
		return err
	}
	s, err := bootstrapTokenSecret(t, role, expires)
	if err != nil {
		return err
	}
	return remote.Create(ctx, s)
}

func (c clusterCacheTokens) Refresh(ctx context.Context, cluster client.ObjectKey, id string, expires, keepAfter time.Time) (time.Time, error) {
	remote, err := c.cache.GetUncachedClient(ctx, cluster)
	if err != nil {
		return time.Time{}, err
	}
	s := &corev1.Secret{}
	if err := remote.Get(ctx, client.ObjectKey{Namespace: tokenNamespace, Name: bootstrapTokenSecretName(id)}, s); err != nil {
		return time.Time{}, err
	}
	// A token far from expiring is left alone, as Cluster API's kubeadm provider does
	// (skipTokenRefreshIfExpiringAfter): resyncs and repeated reconciles then write nothing.
	if current, err := time.Parse(time.RFC3339, string(s.Data[tokenExpirationKey])); err == nil && current.After(keepAfter) {
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
