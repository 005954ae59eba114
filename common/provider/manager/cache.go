package manager

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// NewCache is controller-runtime's cache, except that when it watches one namespace (--namespace)
// its informers are that namespace's own SharedIndexInformers rather than the wrapper
// controller-runtime puts around the informers of every watched namespace.
//
// Why: Cluster API's controller builder (util/controller, v1.14) defers a reconcile until the
// cache has seen what the previous one wrote (DeferNextReconcileUntilCacheUpToDate) and reads the
// cache's progress through GetInformer, which it requires to return a SharedIndexInformer. With a
// watched namespace controller-runtime (v0.24) returns its multi-namespace informer instead, and
// every deferred reconcile then fails with "failed to cast ... informer to SharedIndexInformer",
// again and again: a KairosConfig whose manager restarted between its data and its join token never
// got its token. One namespace means one informer per kind, which is what this hands out.
func NewCache(cfg *rest.Config, opts ctrlcache.Options) (ctrlcache.Cache, error) {
	if len(opts.DefaultNamespaces) != 1 {
		return ctrlcache.New(cfg, opts)
	}
	index := &informerIndex{scheme: opts.Scheme, informers: map[informerKey][]toolscache.SharedIndexInformer{}}
	newInformer := opts.NewInformer
	if newInformer == nil {
		newInformer = toolscache.NewSharedIndexInformer // controller-runtime's default
	}
	opts.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
		informer := newInformer(lw, obj, resync, indexers)
		index.add(obj, informer)
		return informer
	}
	c, err := ctrlcache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	return &namespacedCache{Cache: c, index: index}, nil
}

// namespacedCache answers GetInformer and GetInformerForKind with the one SharedIndexInformer the
// cache runs for the kind.
type namespacedCache struct {
	ctrlcache.Cache
	index *informerIndex
}

func (c *namespacedCache) GetInformer(ctx context.Context, obj client.Object, opts ...ctrlcache.InformerGetOption) (ctrlcache.Informer, error) {
	informer, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return c.index.unwrap(obj, informer), nil
}

func (c *namespacedCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...ctrlcache.InformerGetOption) (ctrlcache.Informer, error) {
	informer, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	if err != nil {
		return nil, err
	}
	// controller-runtime makes a structured object of the kind from the scheme; so does the index.
	obj, err := c.index.scheme.New(gvk)
	if err != nil {
		return informer, nil //nolint:nilerr // not a kind of the scheme: keep controller-runtime's answer
	}
	return c.index.unwrap(obj, informer), nil
}

func (c *namespacedCache) RemoveInformer(ctx context.Context, obj client.Object) error {
	if err := c.Cache.RemoveInformer(ctx, obj); err != nil {
		return err
	}
	c.index.remove(obj)
	return nil
}

// informerIndex records the informers the cache creates, by kind and form.
type informerIndex struct {
	scheme    *runtime.Scheme
	mu        sync.Mutex
	informers map[informerKey][]toolscache.SharedIndexInformer
}

// informerKey names the informers of a kind: controller-runtime keeps structured, unstructured and
// metadata-only informers of one kind apart.
type informerKey struct {
	gvk  schema.GroupVersionKind
	form string
}

func (x *informerIndex) key(obj runtime.Object) (informerKey, bool) {
	gvk, err := apiutil.GVKForObject(obj, x.scheme)
	if err != nil {
		return informerKey{}, false
	}
	form := "structured"
	switch obj.(type) {
	case runtime.Unstructured:
		form = "unstructured"
	case *metav1.PartialObjectMetadata:
		form = "metadata"
	}
	return informerKey{gvk: gvk, form: form}, true
}

func (x *informerIndex) add(obj runtime.Object, informer toolscache.SharedIndexInformer) {
	if k, ok := x.key(obj); ok {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.informers[k] = append(x.informers[k], informer)
	}
}

func (x *informerIndex) remove(obj runtime.Object) {
	if k, ok := x.key(obj); ok {
		x.mu.Lock()
		defer x.mu.Unlock()
		delete(x.informers, k)
	}
}

// unwrap returns the one SharedIndexInformer behind informer, or informer itself when it already
// is one or when the kind has several (a cluster-scoped kind is watched once, a namespaced kind
// once in the watched namespace: several would mean a cache this does not know).
func (x *informerIndex) unwrap(obj runtime.Object, informer ctrlcache.Informer) ctrlcache.Informer {
	if _, ok := informer.(toolscache.SharedIndexInformer); ok {
		return informer
	}
	k, ok := x.key(obj)
	if !ok {
		return informer
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if found := x.informers[k]; len(found) == 1 {
		return found[0]
	}
	return informer
}
