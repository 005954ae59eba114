// Package controlplane_test runs the KairosControlPlane and KairosControlPlaneTemplate
// admission webhooks against a real kube-apiserver (envtest) with Cluster API's core CRDs and
// both Kairos providers' CRDs and webhooks, served by one manager that also runs both
// providers' controllers. No test object has an owner Cluster or carries the manager's
// watch-filter label, so the controllers stay idle and every outcome below is the API server's
// and the webhooks'. One exception: the Cluster of TestInPlaceUpdateResumesOnceTheOperatorIsInstalled
// carries the label, for the manager's ClusterCache to connect to its workload API server, and
// refers to no KairosControlPlane; that test calls the in-place update extension the manager serves.
//
// Run it alone from the repository root:
//
//	cd test && go test -count=1 ./controlplane/
//	cd test && go test -count=1 -run 'TestInvalidKairosControlPlanes/rollout' -v ./controlplane/
//
// kube-apiserver and etcd come from $KUBEBUILDER_ASSETS, or are built from source once and
// cached by hack/envtest-assets.sh (make envtest-assets). Set KAIROS_TEST_LOG=1 to see the
// manager's logs.
package controlplane_test

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/cluster-api/controllers/clustercache"

	bootstrapsetup "github.com/kairos-capi/kairos-capi/bootstrap/setup"
	"github.com/kairos-capi/kairos-capi/common/provider/manager"
	controlplanesetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// watchFilter is the manager's --watch-filter. No test object but one Cluster (see the package
// documentation) carries it, so neither provider's controller reconciles them.
const watchFilter = "kairos-controlplane-webhook-suite"

// mgmt is the management API server with Cluster API's and both providers' CRDs and webhooks,
// and the manager running both providers.
var mgmt *framework.Suite

// providers whose CRDs and webhooks the API server gets.
var providers = []string{"bootstrap", "controlplane"}

// TestMain runs one manager with both providers' controllers and webhooks, as a process
// running several providers would: one webhook server, one ClusterCache.
func TestMain(m *testing.M) {
	os.Exit(framework.RunSuite(m, &mgmt, framework.SuiteOptions{
		Providers:    providers,
		AddToScheme:  []func(*runtime.Scheme) error{bootstrapsetup.AddToScheme, controlplanesetup.AddToScheme},
		Name:         "controlplane-webhook-suite",
		ClusterCache: manager.ClusterCacheOptions{WatchFilter: watchFilter, Concurrency: 1},
		Setup: []framework.SetupFunc{
			func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
				return bootstrapsetup.Setup(ctx, mgr, bootstrapsetup.Options{
					ClusterCache: cc, WatchFilter: watchFilter, TokenTTL: 15 * time.Minute, KairosConfigConcurrency: 1,
				})
			},
			func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
				return controlplanesetup.Setup(ctx, mgr, controlplanesetup.Options{
					ClusterCache: cc, WatchFilter: watchFilter, KairosControlPlaneConcurrency: 1,
				})
			},
		},
	}))
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	return framework.NewNamespace(t, mgmt.Client, "kcp-")
}
