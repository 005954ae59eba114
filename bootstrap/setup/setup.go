// Package setup registers the bootstrap provider's controllers and webhooks with a manager.
// The manager binary uses it, and so do tests and the sandbox that run the provider in-process.
package setup

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controllers/remote"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/reconcilers/kairosconfig"
	"github.com/kairos-capi/kairos-capi/bootstrap/internal/webhooks"
)

// ControllerName identifies the manager in user agents.
const ControllerName = "kairos-bootstrap-manager"

// DefaultTokenTTL is the default lifetime of generated join tokens.
const DefaultTokenTTL = kairosconfig.DefaultTokenTTL

// AddToScheme adds every API the provider reads to s.
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(s); err != nil {
			return err
		}
	}
	return nil
}

// CacheOptions caches only the Secrets that carry the cluster-name label (bootstrap data,
// cluster certificates, kubeconfigs, k3s tokens), not every Secret of the management cluster.
func CacheOptions(namespace string, syncPeriod time.Duration) ctrlcache.Options {
	var namespaces map[string]ctrlcache.Config
	if namespace != "" {
		namespaces = map[string]ctrlcache.Config{namespace: {}}
	}
	req, _ := labels.NewRequirement(clusterv1.ClusterNameLabel, selection.Exists, nil)
	return ctrlcache.Options{
		DefaultNamespaces: namespaces,
		SyncPeriod:        &syncPeriod,
		DefaultTransform:  ctrlcache.TransformStripManagedFields(),
		ByObject: map[client.Object]ctrlcache.ByObject{
			&corev1.Secret{}: {Label: labels.NewSelector().Add(*req)},
		},
	}
}

// Options configure the controllers and webhooks Setup registers.
type Options struct {
	// ClusterCache reaches workload clusters. When nil, Setup creates one; processes that run
	// several providers in one manager share a single cache.
	ClusterCache            clustercache.ClusterCache
	WatchFilter             string
	TokenTTL                time.Duration
	KairosConfigConcurrency int
	ClusterCacheConcurrency int
	ClusterCacheClientQPS   float32
	ClusterCacheClientBurst int
}

// Setup registers the provider's controllers and webhooks with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) error {
	clusterCache := o.ClusterCache
	if clusterCache == nil {
		var err error
		if clusterCache, err = NewClusterCache(ctx, mgr, o); err != nil {
			return err
		}
	}
	if err := (&kairosconfig.Reconciler{
		Client:           mgr.GetClient(),
		APIReader:        mgr.GetAPIReader(),
		ClusterCache:     clusterCache,
		WatchFilterValue: o.WatchFilter,
		TokenTTL:         o.TokenTTL,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: o.KairosConfigConcurrency}); err != nil {
		return err
	}
	if err := (&webhooks.KairosConfig{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KairosConfig webhook: %w", err)
	}
	if err := (&webhooks.KairosConfigTemplate{}).SetupWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the KairosConfigTemplate webhook: %w", err)
	}
	return nil
}

// NewClusterCache creates a ClusterCache that never caches workload Secrets or ConfigMaps:
// join tokens are read uncached.
func NewClusterCache(ctx context.Context, mgr ctrl.Manager, o Options) (clustercache.ClusterCache, error) {
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient:     mgr.GetClient(),
		WatchFilterValue: o.WatchFilter,
		Cache:            clustercache.CacheOptions{DefaultTransform: ctrlcache.TransformStripManagedFields()},
		Client: clustercache.ClientOptions{
			QPS:       o.ClusterCacheClientQPS,
			Burst:     o.ClusterCacheClientBurst,
			UserAgent: remote.DefaultClusterAPIUserAgent(ControllerName),
			Cache: clustercache.ClientCacheOptions{
				// Workload Secrets and ConfigMaps are never cached: join tokens are read uncached.
				DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}},
			},
		},
	}, controller.Options{MaxConcurrentReconciles: o.ClusterCacheConcurrency})
	if err != nil {
		return nil, fmt.Errorf("creating the cluster cache: %w", err)
	}
	return cc, nil
}
