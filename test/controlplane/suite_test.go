// Package controlplane_test runs the KairosControlPlane and KairosControlPlaneTemplate
// admission webhooks against a real kube-apiserver (envtest) with Cluster API's core CRDs and
// both Kairos providers' CRDs and webhooks, served by one manager that also runs both
// providers' controllers. No test object has an owner Cluster or carries the manager's
// watch-filter label, so the controllers stay idle and every outcome below is the API server's
// and the webhooks'.
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
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	bootstrapsetup "github.com/kairos-capi/kairos-capi/bootstrap/setup"
	"github.com/kairos-capi/kairos-capi/common/provider/manager"
	controlplanesetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"
)

// watchFilter is the manager's --watch-filter. No test object carries it, so neither
// provider's controller reconciles them.
const watchFilter = "kairos-controlplane-webhook-suite"

var (
	scheme = runtime.NewScheme()
	mgmt   *framework.Environment
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	for _, add := range []func(*runtime.Scheme) error{bootstrapsetup.AddToScheme, controlplanesetup.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	ctrl.SetLogger(framework.Logger())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var err error
	mgmt, err = startManagement()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = mgmt.Stop() }()

	if err := startManager(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// providers whose CRDs and webhooks the API server gets.
var providers = []string{"bootstrap", "controlplane"}

func startManagement() (*framework.Environment, error) {
	capi, err := framework.CAPICRDFiles()
	if err != nil {
		return nil, err
	}
	ours, err := framework.ProjectCRDFiles(providers...)
	if err != nil {
		return nil, err
	}
	crds, err := framework.LoadCRDs(append(capi, ours...)...)
	if err != nil {
		return nil, err
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, p := range providers {
		dirs = append(dirs, filepath.Join(root, p, "config", "webhook"))
	}
	return framework.Start(framework.Options{CRDs: crds, WebhookDirs: dirs, Scheme: scheme})
}

// startManager runs one manager with both providers' controllers and webhooks, as a process
// running several providers would: one webhook server, one ClusterCache.
func startManager(ctx context.Context) error {
	wh := mgmt.WebhookInstallOptions
	mgr, err := ctrl.NewManager(mgmt.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  manager.CacheOptions("", 10*time.Minute),
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	})
	if err != nil {
		return err
	}
	cc, err := manager.NewClusterCache(ctx, mgr, "controlplane-webhook-suite", manager.ClusterCacheOptions{WatchFilter: watchFilter, Concurrency: 1})
	if err != nil {
		return err
	}
	if err := bootstrapsetup.Setup(ctx, mgr, bootstrapsetup.Options{
		ClusterCache: cc, WatchFilter: watchFilter, TokenTTL: 15 * time.Minute, KairosConfigConcurrency: 1,
	}); err != nil {
		return err
	}
	if err := controlplanesetup.Setup(ctx, mgr, controlplanesetup.Options{
		ClusterCache: cc, WatchFilter: watchFilter, KairosControlPlaneConcurrency: 1,
	}); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	}()
	return mgmt.WaitForWebhooks(30 * time.Second)
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	return framework.NewNamespace(t, mgmt.Client, "kcp-")
}
