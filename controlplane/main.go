// The Kairos control-plane provider manager: reconciles KairosControlPlanes and serves their
// webhooks.
package main

import (
	"context"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kairos-capi/kairos-capi/common/provider/manager"
	"github.com/kairos-capi/kairos-capi/controlplane/setup"
)

// RBAC for the authorized diagnostics (metrics) endpoint.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// version and commit are set by the release build (-ldflags -X).
var version, commit = "dev", ""

func main() {
	var concurrency int
	manager.Main(manager.Provider{
		Name:             setup.ControllerName,
		Version:          version,
		Commit:           commit,
		LeaderElectionID: "kairos-controlplane-manager-leader-election",
		AddToScheme:      setup.AddToScheme,
		Cache:            manager.CacheOptions,
		AddFlags: func(fs *pflag.FlagSet) {
			fs.IntVar(&concurrency, "kairoscontrolplane-concurrency", 10, "Number of KairosControlPlanes reconciled at once.")
		},
		Setup: func(ctx context.Context, mgr ctrl.Manager, o *manager.Options) error {
			cc, err := manager.NewClusterCache(ctx, mgr, setup.ControllerName, o.ClusterCacheOptions())
			if err != nil {
				return err
			}
			// nil unless --feature-gates (a common flag) turns InPlaceUpdates on; then it is fed
			// by a read-only ExtensionConfig reconciler, Cluster API core doing the discovery.
			rc, err := setup.NewRuntimeClient(ctx, mgr, o.WatchFilter)
			if err != nil {
				return err
			}
			return setup.Setup(ctx, mgr, setup.Options{
				ClusterCache: cc, WatchFilter: o.WatchFilter, KairosControlPlaneConcurrency: concurrency, Version: version, RuntimeClient: rc,
			})
		},
	})
}
