// Package lifecycle runs end-to-end scenarios against the in-process management cluster of
// test/harness: Cluster API's own core reconcilers and webhooks, the Kairos bootstrap provider
// and the simulation infrastructure provider, whose simulated Kairos nodes consume the real
// bootstrap data and start real workload API servers. Assertions use Cluster API's own status.
//
// The scenarios here use the bootstrap provider only (no control-plane provider): Cluster API's
// Cluster controller then writes <cluster>-kubeconfig from <cluster>-ca and marks the control
// plane initialized once a control-plane Machine has a nodeRef.
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
	"fmt"
	"os"
	"testing"

	"github.com/kairos-capi/kairos-capi/test/harness"
)

// h is the management cluster shared by every scenario of the package.
var h *harness.Harness

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	h, err = harness.New(harness.Options{})
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
