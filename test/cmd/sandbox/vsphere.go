package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vmware/govmomi/vim25/mo"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	"github.com/kairos-capi/kairos-capi/test/infrastructure"
	"github.com/kairos-capi/kairos-capi/test/simnode"
	"github.com/kairos-capi/kairos-capi/test/vsphere"
)

const (
	// vsphereKubernetesVersion is what the simulated Kairos images ship, as the vSphere flavor
	// names it (test/vsphere does the same).
	vsphereKubernetesVersion = "v1.36.3"
	// vsphereVIP is the control plane's virtual IP (CONTROL_PLANE_ENDPOINT_IP): of the
	// namespace's local range, outside the nodes' addresses (vsphere.NodeAddressPrefix).
	vsphereVIP = "198.18.0.100"
)

// vsphereInfra is the sandbox's vSphere: vcsim, CAPV's manager as a process, and the guest
// bridge that boots the VMs CAPV powers on as Kairos nodes (test/vsphere).
type vsphereInfra struct {
	dir, binary string
	crds        []*apiextensionsv1.CustomResourceDefinition
	vc          *vsphere.VCSim
	manager     *framework.Process
	bridge      *vsphere.Bridge
}

// newVSphereInfra reads CAPV's CRDs from its module, which ReexecInNetns found before the
// sandbox entered its network namespace.
func newVSphereInfra() (*vsphereInfra, error) {
	dir, bin, ok := vsphere.InNetns()
	if !ok || dir == "" || bin == "" {
		return nil, fmt.Errorf("CAPV's module and manager are unknown: the sandbox with -infra vsphere runs in a network namespace it makes itself")
	}
	files, err := vsphere.CRDFiles(dir)
	if err != nil {
		return nil, err
	}
	// The harness runs the simulated infrastructure's controllers whatever the cluster uses
	// (clusterctl init installs their CRDs with -infra sim); nothing of this cluster uses them.
	sim, err := infrastructure.CRDFiles()
	if err != nil {
		return nil, err
	}
	files = append(files, sim...)
	crds, err := framework.LoadCRDs(files...)
	if err != nil {
		return nil, err
	}
	return &vsphereInfra{dir: dir, binary: bin, crds: crds}, nil
}

// start runs vcsim, CAPV's manager against the sandbox's management cluster, and the bridge.
func (v *vsphereInfra) start(ctx context.Context, h *harness.Harness, reg *simnode.Registry, dir string) error {
	var err error
	say("Starting a simulated vCenter (vcsim), CAPV %s's manager and the guest bridge that boots its VMs as Kairos nodes", vsphere.Version)
	if v.vc, err = vsphere.StartVCSim(ctx); err != nil {
		return fmt.Errorf("vcsim: %w", err)
	}
	logDir := filepath.Join(dir, "capv")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return err
	}
	if v.manager, err = vsphere.StartManager(ctx, h, vsphere.ManagerOptions{CAPVDir: v.dir, Binary: v.binary, LogDir: logDir}, v.vc); err != nil {
		return fmt.Errorf("CAPV's manager: %w", err)
	}
	if v.bridge, err = vsphere.StartBridge(ctx, vsphere.BridgeOptions{VCSim: v.vc, Registry: reg, Client: h.Client, Logger: framework.Logger()}); err != nil {
		return err
	}
	say("vCenter %s (datacenter %s, template %s); CAPV's log: %s", v.vc.Host, vsphere.Datacenter, vsphere.TemplateName, filepath.Join(logDir, "capv-manager.log"))
	return nil
}

func (v *vsphereInfra) stop() {
	if v.bridge != nil {
		v.bridge.Stop()
	}
	if v.manager != nil {
		_ = v.manager.Stop(10 * time.Second)
	}
	if v.vc != nil {
		v.vc.Stop()
	}
}

// list prints the simulated vCenter's VMs as `govc ls -l` and `govc vm.info` would show what
// matters here: power state, BIOS UUID (the Nodes' vsphere:// provider IDs) and the addresses
// VMware Tools report.
func (v *vsphereInfra) list(ctx context.Context, out io.Writer) error {
	names, err := v.vc.VMNames(ctx, "*")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nVMs of the simulated vCenter (%s):\n", v.vc.Host)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  NAME\tPOWER\tUUID\tADDRESSES")
	for _, name := range names {
		_, props, err := v.vc.VM(ctx, name)
		if err != nil {
			return err
		}
		if props == nil {
			continue
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", name, props.Runtime.PowerState, props.Config.Uuid, strings.Join(addresses(props), ","))
	}
	return w.Flush()
}

func addresses(vm *mo.VirtualMachine) []string {
	var out []string
	if vm.Guest == nil {
		return nil
	}
	for _, n := range vm.Guest.Net {
		out = append(out, n.IpAddress...)
	}
	return out
}
