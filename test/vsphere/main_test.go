package vsphere_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/kairos-capi/kairos-capi/test/vsphere"
)

// The nodes' addresses and the control-plane VIP are of 198.18.0.0/15, the benchmarking range
// (RFC 2544), routed locally inside a network namespace of the test's own: CAPV drops loopback
// addresses (CAPV/pkg/services/govmomi/util.go sanitizeIPAddrs), so the nodes cannot live on
// 127.x as in the lifecycle tests, and no traffic of the test may leave the machine.
const (
	netnsEnv      = "KAIROS_VSPHERE_NETNS"
	capvDirEnv    = "KAIROS_CAPV_DIR"
	capvBinaryEnv = "KAIROS_CAPV_MANAGER"
	// nodeAddressPrefix is where the registry hands out node addresses; controlPlaneVIP is the
	// flavor's CONTROL_PLANE_ENDPOINT_IP, outside the nodes' addresses.
	nodeAddressPrefix = "198.19"
	controlPlaneVIP   = "198.18.0.100"
	localRange        = "198.18.0.0/15"
	// hostAddress is the namespace's own address, on its loopback, with the default route:
	// kube-apiserver picks its advertise address from the default route's interface and will
	// not start without one (k8s.io/apimachinery/pkg/util/net ChooseHostInterface). The
	// namespace has no other interface, so nothing routed there can leave the machine.
	hostAddress = "198.18.255.254"
)

var capvDir, capvBinary string

// TestMain re-runs the test binary inside a new network namespace (as root: unshare -n) whose
// loopback routes 198.18.0.0/15 locally and is its only interface. Everything the tests start (the management API
// server, vcsim, CAPV's manager, the workload clusters) runs in there. CAPV's module and
// manager binary are found (or built, hack/capv-manager.sh) before, outside: the namespace has
// no route to the module proxy.
func TestMain(m *testing.M) {
	if os.Getenv(netnsEnv) == "" {
		os.Exit(reexecInNetns())
	}
	capvDir, capvBinary = os.Getenv(capvDirEnv), os.Getenv(capvBinaryEnv)
	os.Exit(m.Run())
}

func reexecInNetns() int {
	dir, err := vsphere.ModuleDir(vsphere.Module + "@" + vsphere.Version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vsphere tests: CAPV's module:", err)
		return 1
	}
	bin, err := vsphere.ManagerBinary(vsphere.Version)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vsphere tests:", err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vsphere tests:", err)
		return 1
	}
	args := append([]string{"--net", "--", "/bin/sh", "-c",
		"ip link set lo up && ip route add local " + localRange + " dev lo && ip addr add " + hostAddress + "/32 dev lo && ip route add default dev lo && exec \"$@\"",
		"sh", exe}, os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1", capvDirEnv+"="+dir, capvBinaryEnv+"="+bin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "vsphere tests: running in a network namespace of their own needs root (unshare -n) and ip(8): %v\n", err)
		return 1
	}
	return 0
}
