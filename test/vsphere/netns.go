package vsphere

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// The simulated VMs' network. Their addresses and the control-plane VIPs are of 198.18.0.0/15,
// the benchmarking range (RFC 2544), routed locally inside a network namespace of its own: CAPV
// drops loopback addresses (CAPV/pkg/services/govmomi/util.go sanitizeIPAddrs), so the nodes
// cannot live on 127.x as in the lifecycle tests, and no traffic may leave the machine.
const (
	// NodeAddressPrefix is where the simnode registry hands out node addresses.
	NodeAddressPrefix = "198.19"
	// LocalRange is routed to the namespace's loopback.
	LocalRange = "198.18.0.0/15"
	// HostAddress is the namespace's own address, on its loopback, with the default route:
	// kube-apiserver picks its advertise address from the default route's interface and will
	// not start without one (k8s.io/apimachinery/pkg/util/net ChooseHostInterface). The
	// namespace has no other interface, so nothing routed there can leave the machine.
	HostAddress = "198.18.255.254"
)

// Environment of a process that ReexecInNetns started.
const (
	netnsEnv      = "KAIROS_VSPHERE_NETNS"
	capvDirEnv    = "KAIROS_CAPV_DIR"
	capvBinaryEnv = "KAIROS_CAPV_MANAGER"
)

// InNetns tells whether this process runs in the network namespace ReexecInNetns made it, and
// returns CAPV's module folder and manager binary, found before, outside.
func InNetns() (capvDir, capvBinary string, ok bool) {
	if os.Getenv(netnsEnv) == "" {
		return "", "", false
	}
	return os.Getenv(capvDirEnv), os.Getenv(capvBinaryEnv), true
}

// ReexecInNetns finds CAPV's module and manager binary (building the manager when it is not
// cached: minutes), then runs this program again, with its arguments, in a network namespace
// of its own (NetnsCommand), and returns its exit code. who names the caller in messages.
func ReexecInNetns(who string) int {
	dir, err := ModuleDir(Module + "@" + Version)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: CAPV's module: %v\n", who, err)
		return 1
	}
	bin, err := ManagerBinary(Version)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", who, err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", who, err)
		return 1
	}
	cmd := NetnsCommand(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1", capvDirEnv+"="+dir, capvBinaryEnv+"="+bin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "%s: running in a network namespace of its own needs root (unshare -n) and ip(8): %v\n", who, err)
		return 1
	}
	return 0
}

// NetnsCommand runs exe with args in a new network namespace (as root: unshare -n) whose
// loopback, its only interface, routes LocalRange locally. Everything exe starts (API servers,
// vcsim, CAPV's manager, the workload clusters) runs in there; what needs the module proxy
// (CAPV's module, its manager binary) must be fetched before, outside: the namespace has no
// route out.
func NetnsCommand(exe string, args ...string) *exec.Cmd {
	return exec.Command("unshare", append([]string{"--net", "--", "/bin/sh", "-c",
		"ip link set lo up && ip route add local " + LocalRange + " dev lo && ip addr add " + HostAddress + "/32 dev lo && ip route add default dev lo && exec \"$@\"",
		"sh", exe}, args...)...)
}

// FlavorVariables are the variables a user sets for the vSphere flavor (cluster-template-vsphere.yaml),
// with the simulated vCenter's inventory: one control-plane Machine and one worker of
// distribution dist, the control plane's virtual IP vip (of LocalRange, outside the nodes'
// addresses).
func FlavorVariables(vc *VCSim, name, namespace, dist, kubernetesVersion, vip, password string) map[string]string {
	return map[string]string{
		"CLUSTER_NAME":                name,
		"NAMESPACE":                   namespace,
		"KUBERNETES_VERSION":          kubernetesVersion,
		"KAIROS_DISTRIBUTION":         dist,
		"KAIROS_USER_PASSWORD":        password,
		"CONTROL_PLANE_MACHINE_COUNT": "1",
		"WORKER_MACHINE_COUNT":        "1",
		"CONTROL_PLANE_ENDPOINT_IP":   vip,
		"VSPHERE_SERVER":              vc.Host,
		"VSPHERE_TLS_THUMBPRINT":      vc.Thumbprint,
		"VSPHERE_DATACENTER":          Datacenter,
		"VSPHERE_DATASTORE":           Datastore,
		"VSPHERE_FOLDER":              Folder,
		"VSPHERE_RESOURCE_POOL":       ResourcePool,
		"VSPHERE_NETWORK":             Network,
		"VSPHERE_TEMPLATE":            TemplateName,
	}
}
