package vsphere_test

import (
	"os"
	"testing"

	"github.com/kairos-capi/kairos-capi/test/vsphere"
)

var capvDir, capvBinary string

// TestMain re-runs the test binary inside a network namespace of its own (vsphere.ReexecInNetns:
// as root, its loopback routing 198.18.0.0/15 locally is its only interface). Everything the
// tests start (the management API server, vcsim, CAPV's manager, the workload clusters) runs in
// there. CAPV's module and manager binary are found (or built, hack/capv-manager.sh) before,
// outside: the namespace has no route to the module proxy.
func TestMain(m *testing.M) {
	dir, bin, ok := vsphere.InNetns()
	if !ok {
		os.Exit(vsphere.ReexecInNetns("vsphere tests"))
	}
	capvDir, capvBinary = dir, bin
	os.Exit(m.Run())
}
