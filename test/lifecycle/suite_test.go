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
	"flag"
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

// defaultParallel is how many scenarios run at once unless -test.parallel says otherwise. A
// scenario mostly waits (for simulated nodes, workload API servers, Cluster API's reconciles and
// the control plane's etcd checks), so on 2 cores more of them fit than go test's default of one
// per core; each runs its own workload API server and up to five etcd members (measured: 3.4 GiB
// used at most for the whole package at 6). At 6, scheduled longest first, the machine was still
// a quarter idle; at 8 it was saturated and a k3s node of TestRestartMidRollout stayed not ready
// for four minutes (measured, 2026-11-27): 6 it is. A scenario that restarts the shared manager
// does not call t.Parallel (go test runs it first, while nothing else uses the manager), or has a
// management cluster of its own (TestRestartMidRollout, TestMachinePoolAddsNodeAfterJoinTokenExpired).
// The scenario scheduler (slots, schedule_test.go) enforces the bound, so that the longest
// scenarios start first. With less CPU than 2 cores (a CPU quota: a CI machine's share, or
// ../shared/tools/slow-machine.sh) fewer run at once, in proportion (framework.ScaledToCPUs).
const defaultParallel = 6

func TestMain(m *testing.M) {
	flag.Parse()
	if err := slots.TakeParallelFlag(framework.ScaledToCPUs(defaultParallel)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	opts, err := controlPlaneHarnessOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if h, err = harness.New(opts); err != nil {
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

// controlPlaneHarnessOptions are the options of a management cluster that also runs the
// control-plane provider: the package's, and those of scenarios that need a manager of their own.
func controlPlaneHarnessOptions() (harness.Options, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return harness.Options{}, err
	}
	crds, err := framework.ProjectCRDFiles("controlplane")
	if err != nil {
		return harness.Options{}, err
	}
	return harness.Options{
		ExtraCRDFiles:    crds,
		ExtraWebhookDirs: []string{filepath.Join(root, "controlplane", "config", "webhook")},
		AddToScheme:      []func(*runtime.Scheme) error{controlplanev1.AddToScheme},
		Setup: []harness.SetupFunc{func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			c, err := harness.ProviderClient(mgr)
			if err != nil {
				return err
			}
			return cpsetup.Setup(ctx, mgr, cpsetup.Options{ClusterCache: cc, KairosControlPlaneConcurrency: 4, EtcdHealthInterval: 5 * time.Second,
				Client: countingClient{Client: c, log: controlPlaneWrites}, RuntimeClient: harness.RuntimeClientFrom(ctx)})
		}},
		// Cluster API runs with its in-place update hooks and the Kairos extension registered;
		// only namespaces a scenario opts in (harness.InPlaceNamespaceLabel) see the extension,
		// so every other scenario rolls out by replacing Machines, as without the gate.
		InPlaceUpdates: true,
		// Short join-token lifetime: scenarios run long enough to see refreshes.
		BootstrapTokenTTL: 2 * time.Minute,
	}, nil
}
