// The Kairos bootstrap provider manager: reconciles KairosConfigs and serves their webhooks.
package main

import (
	"context"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kairos-capi/kairos-capi/bootstrap/setup"
	"github.com/kairos-capi/kairos-capi/common/provider/manager"
)

// RBAC for the authorized diagnostics (metrics) endpoint.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// version and commit are set by the release build (-ldflags -X).
var version, commit = "dev", ""

func main() {
	var (
		tokenTTL    time.Duration
		concurrency int
	)
	manager.Main(manager.Provider{
		Name:             setup.ControllerName,
		Version:          version,
		Commit:           commit,
		LeaderElectionID: "kairos-bootstrap-manager-leader-election",
		AddToScheme:      setup.AddToScheme,
		Cache:            manager.CacheOptions,
		AddFlags: func(fs *pflag.FlagSet) {
			fs.DurationVar(&tokenTTL, "bootstrap-token-ttl", setup.DefaultTokenTTL, "Lifetime of generated join tokens; they are refreshed until the node has joined.")
			fs.IntVar(&concurrency, "kairosconfig-concurrency", 100, "Number of KairosConfigs reconciled at once (as Cluster API's kubeadmconfig-concurrency).")
		},
		Setup: func(ctx context.Context, mgr ctrl.Manager, o *manager.Options) error {
			cc, err := manager.NewClusterCache(ctx, mgr, setup.ControllerName, o.ClusterCacheOptions())
			if err != nil {
				return err
			}
			return setup.Setup(ctx, mgr, setup.Options{ClusterCache: cc, WatchFilter: o.WatchFilter, TokenTTL: tokenTTL, KairosConfigConcurrency: concurrency})
		},
	})
}
