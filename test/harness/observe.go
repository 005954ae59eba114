package harness

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// observer is the tests' own informer cache of the management cluster, started on first use and
// shared by every test of the process. Tests that must see every state an object goes through
// (how many Machines exist during a rollout, whether Available ever turned false) watch instead
// of polling: a poll misses what lasts less than its interval, and six scenarios polling five
// times a second were a third of the management API server's requests.
type observer struct {
	once   sync.Once
	err    error
	cache  ctrlcache.Cache
	cancel context.CancelFunc
}

func (h *Harness) observerCache() (ctrlcache.Cache, error) {
	h.observer.once.Do(func() {
		c, err := ctrlcache.New(h.Env.Config, ctrlcache.Options{Scheme: h.Scheme})
		if err != nil {
			h.observer.err = fmt.Errorf("creating the tests' cache: %w", err)
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = c.Start(ctx) }()
		h.observer.cache, h.observer.cancel = c, cancel
	})
	return h.observer.cache, h.observer.err
}

// Observe calls seen with every object of obj's kind once the tests' cache has listed them,
// then again after every add, update and delete, in the order the API server reported them,
// until ctx ends. The set is kept from the watch events themselves, not re-read from the cache,
// which may already be ahead of the event being handled: so seen sees every state in turn. Calls
// come one at a time; the objects are the cache's and must not be modified.
func (h *Harness) Observe(ctx context.Context, obj client.Object, seen func(objects []client.Object)) error {
	c, err := h.observerCache()
	if err != nil {
		return err
	}
	informer, err := c.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("watching %T: %w", obj, err)
	}
	var mu sync.Mutex
	current := map[types.UID]client.Object{}
	synced := false
	report := func() {
		objects := make([]client.Object, 0, len(current))
		for _, o := range current {
			objects = append(objects, o)
		}
		sort.Slice(objects, func(i, j int) bool {
			return objects[i].GetNamespace()+"/"+objects[i].GetName() < objects[j].GetNamespace()+"/"+objects[j].GetName()
		})
		seen(objects)
	}
	handle := func(o any, deleted bool) {
		if tombstone, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o, deleted = tombstone.Obj, true
		}
		co, ok := o.(client.Object)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if deleted {
			delete(current, co.GetUID())
		} else {
			current[co.GetUID()] = co
		}
		if synced {
			report()
		}
	}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { handle(o, false) },
		UpdateFunc: func(_, o any) { handle(o, false) },
		DeleteFunc: func(o any) { handle(o, true) },
	})
	if err != nil {
		return fmt.Errorf("watching %T: %w", obj, err)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		_ = informer.RemoveEventHandler(reg)
		return fmt.Errorf("watching %T: %w", obj, ctx.Err())
	}
	mu.Lock()
	synced = true
	report()
	mu.Unlock()
	go func() {
		<-ctx.Done()
		_ = informer.RemoveEventHandler(reg)
	}()
	return nil
}

func (o *observer) stop() {
	if o.cancel != nil {
		o.cancel()
	}
}
