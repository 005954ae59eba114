// Command capv-smoke checks that the real Cluster API vSphere provider (CAPV) runs here: it
// starts a vCenter simulator (govmomi's in-process vcsim, VPX model: a datacenter, a cluster
// with one host, a datastore, a network and a VM template), a management API server with
// Cluster API running in-process (test/harness, Cluster API v1.14.2) and CAPV's CRDs, and
// CAPV's own manager binary (hack/capv-manager.sh) as a process with CAPV's shipped RBAC (the
// manager-role of its config/rbac, through impersonation of its ServiceAccount). It then
// creates a Cluster whose infrastructure is a VSphereCluster pointing at the simulator and waits
// until CAPV reports the VSphereCluster provisioned and Cluster API reports the Cluster's
// infrastructure ready. Then it creates a worker Machine on a VSphereMachine with ready
// bootstrap data, plays the guest once CAPV has cloned and powered on the VM (decodes the
// guestinfo CAPV wrote, reports an IP address through vcsim) and waits until CAPV marks the
// VSphereMachine provisioned and Cluster API copies its provider ID to the Machine. No Node
// ever joins: the Machine stays without a node reference. The template works around a vcsim
// bug that drops a clone spec's extraConfig (cloneSpecTemplate).
//
//	go run ./test/cmd/capv-smoke        # from the repository root; builds CAPV's manager and the
//	                                    # envtest binaries first when they are not cached
//	go run ./test/cmd/capv-smoke -keep  # keeps the logs (CAPV's manager log) and prints where
//
// The simulator and manager set-up is test/vsphere's (the guest bridge there does what this
// smoke does by hand, for whole clusters). It is not a test and make test does not run it.
// docs/capv-on-vcsim.md says what CAPV reads and writes.
package main

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	"github.com/kairos-capi/kairos-capi/test/vsphere"
)

const (
	namespace   = "capv-smoke"
	clusterName = "smoke"
)

func main() {
	if err := run(); err != nil {
		os.Exit(1)
	}
}

func run() (err error) {
	// Said before the deferred clean-ups run, which may take a while.
	reported := false
	report := func() {
		if err != nil && !reported {
			reported = true
			fmt.Fprintln(os.Stderr, "capv-smoke: FAIL:", err)
		}
	}
	defer report()
	var (
		managerBin  = flag.String("capv-manager", "", "CAPV manager binary (default: hack/capv-manager.sh builds or finds it)")
		capvVersion = flag.String("capv-version", vsphere.Version, "CAPV version (its CRDs and RBAC are read from the module cache)")
		timeout     = flag.Duration("timeout", 3*time.Minute, "how long to wait for the VSphereCluster")
		keep        = flag.Bool("keep", false, "keep the log folder")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout+2*time.Minute)
	defer cancel()

	if *managerBin == "" {
		if *managerBin, err = vsphere.ManagerBinary(*capvVersion); err != nil {
			return err
		}
	}
	capvDir, err := vsphere.ModuleDir(vsphere.Module + "@" + *capvVersion)
	if err != nil {
		return err
	}
	logDir, err := os.MkdirTemp("", "capv-smoke-")
	if err != nil {
		return err
	}
	if *keep {
		defer fmt.Println("capv-smoke: logs kept in", logDir)
	} else {
		defer os.RemoveAll(logDir)
	}

	// vCenter simulator.
	vc, err := vsphere.StartVCSim(ctx)
	if err != nil {
		return fmt.Errorf("vcsim: %w", err)
	}
	defer vc.Stop()
	fmt.Printf("capv-smoke: vcsim at %s (vCenter %s), template %q, thumbprint %s\n",
		vc.Host, vc.Version, vsphere.TemplateName, vc.Thumbprint)

	// Management cluster with Cluster API and CAPV's CRDs.
	crds, err := vsphere.CRDFiles(capvDir)
	if err != nil {
		return err
	}
	h, err := harness.New(harness.Options{ExtraCRDFiles: crds})
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	defer func() { _ = h.Stop() }()
	c := h.Client

	manager, err := vsphere.StartManager(ctx, h, vsphere.ManagerOptions{CAPVDir: capvDir, Binary: *managerBin, LogDir: logDir, PodName: "capv-manager-smoke"}, vc)
	if err != nil {
		return err
	}
	defer func() {
		if err := manager.Stop(10 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "capv-smoke: stopping CAPV's manager:", err)
		}
	}()
	defer func() { report() }()

	// A Cluster whose infrastructure is a VSphereCluster on the simulator. Cluster API's
	// Cluster controller sets the VSphereCluster's owner reference; CAPV does the rest.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	vsphereCluster := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
		"kind":       "VSphereCluster",
		"metadata":   map[string]any{"name": clusterName, "namespace": namespace},
		"spec": map[string]any{
			"server":     vc.Host,
			"thumbprint": vc.Thumbprint,
			// An address of the reserved range the lifecycle tests use: nothing listens on it yet.
			"controlPlaneEndpoint": map[string]any{"host": "198.18.0.100", "port": int64(6443)},
		},
	}}
	if err := c.Create(ctx, vsphereCluster); err != nil {
		return fmt.Errorf("creating the VSphereCluster: %w", err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: namespace},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "VSphereCluster", Name: clusterName,
		}},
	}
	if err := c.Create(ctx, cluster); err != nil {
		return fmt.Errorf("creating the Cluster: %w", err)
	}

	start := time.Now()
	deadline := start.Add(*timeout)
	last := ""
	for {
		if exited, err := manager.Exited(); exited {
			return fmt.Errorf("CAPV's manager exited (%v); last log lines:\n%s", err, tail(manager.Output(), 30))
		}
		vs := &unstructured.Unstructured{}
		vs.SetGroupVersionKind(vsphereCluster.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(vsphereCluster), vs); err != nil {
			return err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		provisioned, _, _ := unstructured.NestedBool(vs.Object, "status", "initialization", "provisioned")
		version, _, _ := unstructured.NestedString(vs.Object, "status", "vCenterVersion")
		state := fmt.Sprintf("VSphereCluster provisioned=%v vCenterVersion=%q conditions=[%s]; Cluster InfrastructureReady=%s",
			provisioned, version, conditionSummary(vs), conditionStatus(cluster, clusterv1.ClusterInfrastructureReadyCondition))
		if state != last {
			fmt.Printf("capv-smoke: %5.1fs %s\n", time.Since(start).Seconds(), state)
			last = state
		}
		if provisioned && conditions.IsTrue(cluster, clusterv1.ClusterInfrastructureReadyCondition) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the VSphereCluster is not provisioned after %s; CAPV's last log lines:\n%s", *timeout, tail(manager.Output(), 30))
		}
		time.Sleep(500 * time.Millisecond)
	}

	// The evidence in CAPV's own words.
	for _, want := range []string{"Created and cached vSphere client session"} {
		line := grepLine(manager.Output(), want)
		if line == "" {
			return fmt.Errorf("CAPV's manager never logged %q", want)
		}
		fmt.Println("capv-smoke: CAPV logged:", line)
	}
	fmt.Printf("capv-smoke: cluster stage passed: CAPV %s reconciled VSphereCluster %s/%s against vcsim; Cluster API marked the Cluster's infrastructure ready (%.1fs)\n",
		*capvVersion, namespace, clusterName, time.Since(start).Seconds())

	if err := machineStage(ctx, c, vc, manager, time.Now().Add(*timeout)); err != nil {
		return err
	}
	fmt.Printf("capv-smoke: PASS (%.1fs)\n", time.Since(start).Seconds())
	return nil
}

// guestIP is the address the smoke, playing the guest's VMware Tools, reports for the VM: one
// of the reserved range the lifecycle tests use (CAPV ignores loopback and link-local ones).
const guestIP = "198.18.0.10"

// machineStage creates a worker Machine with ready bootstrap data (a Secret without a format
// key, as the Kairos bootstrap provider writes) on a VSphereMachine, waits for CAPV to clone
// the template in vcsim, reads back what CAPV put in the clone's guestinfo, reports an IP
// address for it as VMware Tools would (vcsim's SET.guest.ipAddress), and waits until CAPV
// marks the VSphereMachine provisioned with the provider ID and address, and Cluster API copies
// the provider ID to the Machine.
func machineStage(ctx context.Context, c client.Client, vc *vsphere.VCSim, manager *framework.Process, deadline time.Time) error {
	const name = "smoke-worker"
	userdata := "#cloud-config\nhostname: " + name + "\n"
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": []byte(userdata)},
	}); err != nil {
		return err
	}
	vsphereMachine := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
		"kind":       "VSphereMachine",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{
			// The VPX model's inventory (govmomi simulator/model.go names: DC0, DC0_C0, LocalDS_0).
			"template":     vsphere.TemplateName,
			"datacenter":   vsphere.Datacenter,
			"datastore":    vsphere.Datastore,
			"folder":       vsphere.Folder,
			"resourcePool": vsphere.ResourcePool,
			"cloneMode":    "fullClone",
			"numCPUs":      int64(2),
			"memoryMiB":    int64(2048),
			"network": map[string]any{"devices": []any{
				map[string]any{"networkName": vsphere.Network, "dhcp4": true},
			}},
		},
	}}
	if err := c.Create(ctx, vsphereMachine); err != nil {
		return fmt.Errorf("creating the VSphereMachine: %w", err)
	}
	machine := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Spec: clusterv1.MachineSpec{
			ClusterName: clusterName,
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(name + "-bootstrap")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "VSphereMachine", Name: name,
			},
		},
	}
	if err := c.Create(ctx, machine); err != nil {
		return fmt.Errorf("creating the Machine: %w", err)
	}

	start := time.Now()
	last := ""
	reported := false
	for {
		if exited, err := manager.Exited(); exited {
			return fmt.Errorf("CAPV's manager exited (%v); last log lines:\n%s", err, tail(manager.Output(), 30))
		}
		vm, props, err := vc.VM(ctx, name)
		if err != nil {
			return err
		}
		vs := &unstructured.Unstructured{}
		vs.SetGroupVersionKind(vsphereMachine.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(vsphereMachine), vs); err != nil {
			return err
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(machine), machine); err != nil {
			return err
		}
		provisioned, _, _ := unstructured.NestedBool(vs.Object, "status", "initialization", "provisioned")
		providerID, _, _ := unstructured.NestedString(vs.Object, "spec", "providerID")
		addresses, _, _ := unstructured.NestedSlice(vs.Object, "status", "addresses")
		vmState := "absent"
		if vm != nil {
			vmState = fmt.Sprintf("%s uuid=%s", props.Runtime.PowerState, props.Config.Uuid)
		}
		state := fmt.Sprintf("vcsim VM: %s; VSphereMachine provisioned=%v providerID=%q addresses=%v conditions=[%s]; Machine providerID=%q",
			vmState, provisioned, providerID, addresses, conditionSummary(vs), machine.Spec.ProviderID)
		if state != last {
			fmt.Printf("capv-smoke: %5.1fs %s\n", time.Since(start).Seconds(), state)
			last = state
		}

		// The guest's side: once powered on, check what CAPV gave it and report an address.
		if vm != nil && !reported && props.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
			if err := checkGuestinfo(props, userdata); err != nil {
				return err
			}
			task, err := vm.Reconfigure(ctx, types.VirtualMachineConfigSpec{ExtraConfig: []types.BaseOptionValue{
				&types.OptionValue{Key: "SET.guest.ipAddress", Value: guestIP},
			}})
			if err != nil {
				return err
			}
			if err := task.Wait(ctx); err != nil {
				return err
			}
			fmt.Printf("capv-smoke: %5.1fs guest reported %s (SET.guest.ipAddress)\n", time.Since(start).Seconds(), guestIP)
			reported = true
		}

		if provisioned && vm != nil && machine.Spec.ProviderID != "" {
			want := "vsphere://" + props.Config.Uuid
			if providerID != want || machine.Spec.ProviderID != want {
				return fmt.Errorf("provider IDs: VSphereMachine %q, Machine %q, want %q (vsphere:// and the VM's BIOS UUID, config.uuid)",
					providerID, machine.Spec.ProviderID, want)
			}
			if !strings.Contains(fmt.Sprint(addresses), guestIP) {
				return fmt.Errorf("VSphereMachine addresses %v lack %s", addresses, guestIP)
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the VSphereMachine is not provisioned in time; CAPV's last log lines:\n%s", tail(manager.Output(), 40))
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, want := range []string{"Starting clone process", "Applied bootstrap data to VM clone spec", "Updating VM metadata", "Powering on VM", "VSphereVM is ready", "Updating providerID on VSphereMachine"} {
		line := grepLine(manager.Output(), want)
		if line == "" {
			return fmt.Errorf("CAPV's manager never logged %q", want)
		}
		fmt.Println("capv-smoke: CAPV logged:", line)
	}
	fmt.Printf("capv-smoke: machine stage passed: CAPV cloned %s, wrote the bootstrap data to guestinfo, took the guest's address and set providerID %s (%.1fs)\n",
		name, machine.Spec.ProviderID, time.Since(start).Seconds())
	return nil
}

// checkGuestinfo decodes the clone's guestinfo keys as a guest would (CAPV writes them in
// pkg/services/govmomi/extra/config.go: base64 with an ".encoding" key saying so) and prints
// the metadata CAPV generated (pkg/util/constants.go metadataFormat).
func checkGuestinfo(props *mo.VirtualMachine, userdata string) error {
	keys := map[string]string{}
	for _, o := range props.Config.ExtraConfig {
		if ov := o.GetOptionValue(); ov != nil && strings.HasPrefix(ov.Key, "guestinfo.") {
			keys[ov.Key], _ = ov.Value.(string)
		}
	}
	var all []string
	for _, o := range props.Config.ExtraConfig {
		if ov := o.GetOptionValue(); ov != nil {
			all = append(all, fmt.Sprintf("%s=%.40v", ov.Key, ov.Value))
		}
	}
	for _, k := range []string{"guestinfo.userdata.encoding", "guestinfo.metadata.encoding"} {
		if keys[k] != "base64" {
			return fmt.Errorf("%s is %q, want base64; config.extraConfig: %v", k, keys[k], all)
		}
	}
	data, err := base64.StdEncoding.DecodeString(keys["guestinfo.userdata"])
	if err != nil {
		return fmt.Errorf("guestinfo.userdata: %w", err)
	}
	if string(data) != userdata {
		return fmt.Errorf("guestinfo.userdata is %q, want the bootstrap Secret's value %q", data, userdata)
	}
	metadata, err := base64.StdEncoding.DecodeString(keys["guestinfo.metadata"])
	if err != nil {
		return fmt.Errorf("guestinfo.metadata: %w", err)
	}
	var names []string
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Printf("capv-smoke: guestinfo keys %v; userdata matches the bootstrap Secret; metadata:\n%s\n", names, strings.TrimSpace(string(metadata)))
	if props.Guest != nil {
		for _, n := range props.Guest.Net {
			fmt.Printf("capv-smoke: guest.net before the report: mac=%s network=%q ips=%v connected=%v\n", n.MacAddress, n.Network, n.IpAddress, n.Connected)
		}
	}
	return nil
}

func conditionSummary(u *unstructured.Unstructured) string {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var parts []string
	for _, item := range list {
		m, _ := item.(map[string]any)
		s := fmt.Sprintf("%v=%v", m["type"], m["status"])
		if r, _ := m["reason"].(string); r != "" {
			s += "(" + r + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func conditionStatus(cluster *clusterv1.Cluster, t string) string {
	c := conditions.Get(cluster, t)
	if c == nil {
		return "unset"
	}
	return fmt.Sprintf("%s(%s)", c.Status, c.Reason)
}

func grepLine(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func tail(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
