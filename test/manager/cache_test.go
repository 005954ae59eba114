// Package manager_test runs the providers' manager cache (common/provider/manager) against a real
// API server.
package manager_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	capicontrollerutil "sigs.k8s.io/cluster-api/util/controller"

	"github.com/kairos-capi/kairos-capi/common/provider/manager"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// With --namespace, a reconcile deferred until the cache has seen the previous one's write runs
// once the cache caught up. Cluster API's controller builder reads the cache's progress from a
// SharedIndexInformer, which controller-runtime's own cache does not hand out for a watched
// namespace (checked here too, so that this test says when the workaround can go); without
// manager.NewCache every such reconcile failed, for good.
func TestDeferredReconcileInAWatchedNamespace(t *testing.T) {
	env := framework.StartCore(t)
	ns := framework.NewNamespace(t, env.Client, "watched-")

	for _, tc := range []struct {
		name     string
		newCache ctrlcache.NewCacheFunc
		// sharedIndexInformer: GetInformer returns a SharedIndexInformer.
		sharedIndexInformer bool
	}{
		{name: "controller-runtime's cache", newCache: ctrlcache.New, sharedIndexInformer: false},
		{name: "the providers' cache", newCache: manager.NewCache, sharedIndexInformer: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
				Scheme:                 env.Client.Scheme(),
				Metrics:                metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress: "0",
				Cache:                  manager.CacheOptions(ns, 10*time.Minute),
				NewCache:               tc.newCache,
				Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
			})
			if err != nil {
				t.Fatal(err)
			}
			informer, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{}, ctrlcache.BlockUntilSynced(false))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := informer.(toolscache.SharedIndexInformer); ok != tc.sharedIndexInformer {
				t.Fatalf("GetInformer returned a %T; a SharedIndexInformer: %t, want %t", informer, ok, tc.sharedIndexInformer)
			}
			if !tc.sharedIndexInformer {
				return
			}

			r := &annotatingReconciler{client: mgr.GetClient()}
			r.controller, err = capicontrollerutil.NewControllerManagedBy(mgr, ctrl.Log).
				For(&corev1.ConfigMap{}).Named("deferred").Build(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- mgr.Start(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("manager: %v", err)
				}
			})

			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deferred"}}
			if err := env.Client.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			framework.Eventually(t, 20*time.Second, func() error {
				if r.afterWrite.Load() == 0 {
					return fmt.Errorf("no reconcile after the one that deferred it")
				}
				return nil
			})
		})
	}
}

// annotatingReconciler annotates a ConfigMap once, deferring its next reconcile until the cache
// has seen the annotation, and counts the reconciles that find it.
type annotatingReconciler struct {
	client     client.Client
	controller capicontrollerutil.Controller
	afterWrite atomic.Int32
}

const annotation = "test.kairos.io/reconciled"

func (r *annotatingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cm := &corev1.ConfigMap{}
	if err := r.client.Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if _, ok := cm.Annotations[annotation]; ok {
		r.afterWrite.Add(1)
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	metav1.SetMetaDataAnnotation(&cm.ObjectMeta, annotation, "")
	if err := r.client.Patch(ctx, cm, patch); err != nil {
		return ctrl.Result{}, err
	}
	r.controller.DeferNextReconcileUntilCacheUpToDate(cm, capicontrollerutil.StructuredObject(corev1.SchemeGroupVersion, "ConfigMap"), cm.ResourceVersion)
	return ctrl.Result{}, nil
}
