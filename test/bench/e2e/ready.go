package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
)

// isReady is the bootstrap-config contract's readiness: the data Secret's name is published and
// initialization.dataSecretCreated is true.
func isReady(u *unstructured.Unstructured) bool {
	name, _, _ := unstructured.NestedString(u.Object, "status", "dataSecretName")
	created, _, _ := unstructured.NestedBool(u.Object, "status", "initialization", "dataSecretCreated")
	return name != "" && created
}

// readyWatch records when each config of a namespace first reports ready. It watches instead
// of polling: listing hundreds of configs several times a second would load the API server the
// managers are measured against.
type readyWatch struct {
	want int

	mu      sync.Mutex
	readyAt map[string]time.Time
	all     chan struct{}
	stop    chan struct{}
}

// watchReady starts watching the configs of kind in namespace, after their current state is
// known. The watch runs with the orchestrator's own credentials, straight to the API server: it
// is not counted.
func watchReady(ctx context.Context, cfg *rest.Config, kind configKind, namespace string, want int) (*readyWatch, error) {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a dynamic client: %w", err)
	}
	ri := dc.Resource(schema.GroupVersionResource{Group: kind.Group, Version: kind.Version, Resource: kind.Resource}).Namespace(namespace)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return ri.List(ctx, o) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, o)
		},
	}
	w := &readyWatch{want: want, readyAt: map[string]time.Time{}, all: make(chan struct{}), stop: make(chan struct{})}
	inf := toolscache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, toolscache.Indexers{})
	observe := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || !isReady(u) {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, seen := w.readyAt[u.GetName()]; seen {
			return
		}
		w.readyAt[u.GetName()] = now
		if len(w.readyAt) == w.want {
			close(w.all)
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return nil, fmt.Errorf("watching %s: %w", kind.Resource, err)
	}
	go inf.RunWithContext(mergeDone(ctx, w.stop))
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !toolscache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		close(w.stop)
		return nil, fmt.Errorf("watching %s in %s: the first list did not complete", kind.Resource, namespace)
	}
	return w, nil
}

// Done is closed when every config has reported ready.
func (w *readyWatch) Done() <-chan struct{} { return w.all }

// Last returns when the last config became ready and how many are ready.
func (w *readyWatch) Last() (time.Time, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var last time.Time
	for _, t := range w.readyAt {
		if t.After(last) {
			last = t
		}
	}
	return last, len(w.readyAt)
}

// Stop ends the watch.
func (w *readyWatch) Stop() { close(w.stop) }

// mergeDone returns a context cancelled when ctx is or stop is closed.
func mergeDone(ctx context.Context, stop <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}
