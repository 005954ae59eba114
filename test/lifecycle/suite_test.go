// Package lifecycle runs end-to-end scenarios against the in-process management cluster of
// test/harness: Cluster API's own core reconcilers and webhooks, the Kairos bootstrap provider
// and the simulation infrastructure provider, whose simulated Kairos nodes consume the real
// bootstrap data and start real workload API servers. Assertions use Cluster API's own status.
//
// The management cluster also runs the control-plane provider. Scenarios of standalone.go and
// refusal_test.go use the bootstrap provider only (no controlPlaneRef): Cluster API's Cluster
// controller then writes <cluster>-kubeconfig from <cluster>-ca and marks the control plane
// initialized once a control-plane Machine has a nodeRef. The controlplane_test.go scenarios
// use a KairosControlPlane. machinepool_test.go starts its own management cluster, whose
// bootstrap provider gives join tokens a lifetime of seconds, and runs a MachinePool on
// KairosSimMachinePool infrastructure.
//
// Run everything, or one scenario for one distribution:
//
//	cd test && go test ./lifecycle -v
//	cd test && go test ./lifecycle -run TestStandaloneControlPlaneAndWorkers/k0s -v
//
// KUBEBUILDER_ASSETS is optional: without it the envtest binaries are built from source once
// and cached. KAIROS_TEST_LOG=1 prints the controllers' and simulated nodes' logs.
package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"

	"sigs.k8s.io/cluster-api/controllers/clustercache"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	cpsetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/test/framework"

	"github.com/kairos-capi/kairos-capi/test/harness"
)

// h is the management cluster shared by every scenario of the package.
var h *harness.Harness

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	root, err := framework.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	crds, err := framework.ProjectCRDFiles("controlplane")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	h, err = harness.New(harness.Options{
		ExtraCRDFiles:    crds,
		ExtraWebhookDirs: []string{filepath.Join(root, "controlplane", "config", "webhook")},
		AddToScheme:      []func(*runtime.Scheme) error{controlplanev1.AddToScheme},
		Setup: []harness.SetupFunc{func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			return cpsetup.Setup(ctx, mgr, cpsetup.Options{ClusterCache: cc, KairosControlPlaneConcurrency: 4, EtcdHealthInterval: 5 * time.Second,
				Client: countingClient{Client: mgr.GetClient(), log: controlPlaneWrites}})
		}},
		// Short join-token lifetime: scenarios run long enough to see refreshes.
		BootstrapTokenTTL: 2 * time.Minute,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the lifecycle harness:", err)
		return 1
	}
	defer func() {
		if err := h.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the lifecycle harness:", err)
		}
	}()
	return m.Run()
}
