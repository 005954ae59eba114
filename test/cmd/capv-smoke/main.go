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
// It is not a test and make test does not run it. docs/capv-on-vcsim.md says what CAPV reads
// and writes, for the next step (a guest bridge to simulated Kairos nodes).
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/simulator"
	_ "github.com/vmware/govmomi/vapi/simulator" // registers the REST (tagging) endpoints CAPV logs into
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
)

const (
	capvModule = "sigs.k8s.io/cluster-api-provider-vsphere"
	// capvNamespace and capvServiceAccount are where clusterctl would install CAPV
	// (config/default: namespace capv-system, namePrefix capv-).
	capvNamespace      = "capv-system"
	capvServiceAccount = "capv-manager"
	templateName       = "kairos-template"
	namespace          = "capv-smoke"
	clusterName        = "smoke"
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
		capvVersion = flag.String("capv-version", "v1.16.1", "CAPV version (its CRDs and RBAC are read from the module cache)")
		timeout     = flag.Duration("timeout", 3*time.Minute, "how long to wait for the VSphereCluster")
		keep        = flag.Bool("keep", false, "keep the log folder")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout+2*time.Minute)
	defer cancel()

	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if *managerBin == "" {
		cmd := exec.Command(filepath.Join(root, "hack", "capv-manager.sh"))
		cmd.Env = append(os.Environ(), "CAPV_VERSION="+*capvVersion)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("hack/capv-manager.sh: %w", err)
		}
		*managerBin = strings.TrimSpace(string(out))
	}
	capvDir, err := moduleDir(capvModule + "@" + *capvVersion)
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
	vc, err := startVCSim(ctx)
	if err != nil {
		return fmt.Errorf("vcsim: %w", err)
	}
	defer vc.stop()
	fmt.Printf("capv-smoke: vcsim at %s (vCenter %s), template %q, thumbprint %s\n",
		vc.host, vc.version, templateName, vc.thumbprint)

	// Management cluster with Cluster API and CAPV's CRDs.
	crds, err := filepath.Glob(filepath.Join(capvDir, "config", "default", "crd", "bases", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no CRDs under %s/config/default/crd/bases (%v)", capvDir, err)
	}
	h, err := harness.New(harness.Options{ExtraCRDFiles: crds})
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	defer func() { _ = h.Stop() }()
	c := h.Client

	manager, err := startManager(ctx, h, capvDir, *managerBin, logDir, vc)
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
			"server":     vc.host,
			"thumbprint": vc.thumbprint,
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
func machineStage(ctx context.Context, c client.Client, vc *vcsim, manager *framework.Process, deadline time.Time) error {
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
			"template":     templateName,
			"datacenter":   "DC0",
			"datastore":    "LocalDS_0",
			"folder":       "/DC0/vm",
			"resourcePool": "/DC0/host/DC0_C0/Resources",
			"cloneMode":    "fullClone",
			"numCPUs":      int64(2),
			"memoryMiB":    int64(2048),
			"network": map[string]any{"devices": []any{
				map[string]any{"networkName": "VM Network", "dhcp4": true},
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
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptrTo(name + "-bootstrap")},
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
		vm, props, err := vc.vm(ctx, name)
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

// vm returns the VM of that name and the properties the guest side reads, or nil when it does
// not exist (yet).
func (v *vcsim) vm(ctx context.Context, name string) (*object.VirtualMachine, *mo.VirtualMachine, error) {
	vm, err := v.finder.VirtualMachine(ctx, name)
	if err != nil {
		var nf *find.NotFoundError
		if errors.As(err, &nf) {
			return nil, nil, nil
		}
		return nil, nil, err
	}
	var props mo.VirtualMachine
	if err := vm.Properties(ctx, vm.Reference(), []string{"config.extraConfig", "config.uuid", "runtime.powerState", "guest.net"}, &props); err != nil {
		return nil, nil, err
	}
	if props.Config == nil {
		return nil, nil, nil // still being created
	}
	return vm, &props, nil
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

func ptrTo[T any](v T) *T { return &v }

// vcsim is a running in-process vCenter simulator.
type vcsim struct {
	model      *simulator.Model
	server     *simulator.Server
	host       string // host:port, as VSphereCluster.spec.server
	thumbprint string // SHA-256 (config/templates/README.md tells users to take that one), as VSphereCluster.spec.thumbprint
	version    string
	user, pass string
	client     *vim25.Client // logged in: the "guest" side of the smoke uses it
	finder     *find.Finder
}

// stop closes the simulator. vcsim's server, like httptest's, waits for requests in flight, and
// a property collector's WaitForUpdates of CAPV's manager (stopped before) may never end: give
// it a few seconds, then leave it to the process' exit.
func (v *vcsim) stop() {
	if v.client != nil {
		_ = session.NewManager(v.client).Logout(context.Background())
	}
	done := make(chan struct{})
	go func() {
		v.server.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		fmt.Fprintln(os.Stderr, "capv-smoke: vcsim did not close within 5s (a request in flight); leaving it to the exit")
	}
	v.model.Remove() // its datastores' folder (govcsim-* in TMPDIR)
}

// startVCSim starts a VPX (vCenter) model listening on 127.0.0.1 with TLS and the REST
// endpoints, and turns its first VM into a powered-off template named templateName. The
// model and server set-up follows govmomi's simulator package (simulator/model.go VPX,
// simulator/simulator.go Service.NewServer) and CAPV's own test helper
// (internal/test/helpers/vcsim/builder.go: TLS, RegisterEndpoints, vapi/simulator import).
func startVCSim(ctx context.Context) (*vcsim, error) {
	model := simulator.VPX()
	model.ClusterHost = 1 // one host in the cluster
	model.Host = 0        // no standalone host
	model.Machine = 1     // one VM per resource pool: it becomes the template
	if err := model.Create(); err != nil {
		return nil, err
	}
	model.Service.Listen = &url.URL{Host: "127.0.0.1:0"}
	model.Service.TLS = new(tls.Config)
	model.Service.RegisterEndpoints = true
	server := model.Service.NewServer()
	v := &vcsim{model: model, server: server, host: server.URL.Host}
	v.user = server.URL.User.Username()
	v.pass, _ = server.URL.User.Password()
	if cert := server.Certificate(); cert != nil {
		v.thumbprint = soap.ThumbprintSHA256(cert)
	}

	c, err := vim25.NewClient(ctx, soap.NewClient(server.URL, true))
	if err != nil {
		v.stop()
		return nil, err
	}
	v.version = c.ServiceContent.About.Version
	if err := session.NewManager(c).Login(ctx, server.URL.User); err != nil {
		v.stop()
		return nil, err
	}
	v.client = c
	v.finder = find.NewFinder(c)
	dc, err := v.finder.DefaultDatacenter(ctx)
	if err != nil {
		v.stop()
		return nil, err
	}
	v.finder.SetDatacenter(dc)
	if err := v.makeTemplate(ctx); err != nil {
		v.stop()
		return nil, fmt.Errorf("template: %w", err)
	}
	return v, nil
}

// makeTemplate powers off the model's first VM, renames it templateName and marks it a template,
// as an imported Kairos OVA would be.
func (v *vcsim) makeTemplate(ctx context.Context) error {
	vms, err := v.finder.VirtualMachineList(ctx, "*")
	if err != nil {
		return err
	}
	vm := vms[0]
	if state, err := vm.PowerState(ctx); err == nil && state == types.VirtualMachinePowerStatePoweredOn {
		task, err := vm.PowerOff(ctx)
		if err != nil {
			return err
		}
		if err := task.Wait(ctx); err != nil {
			return err
		}
	}
	task, err := vm.Rename(ctx, templateName)
	if err != nil {
		return err
	}
	if err := task.Wait(ctx); err != nil {
		return err
	}
	if err := vm.MarkAsTemplate(ctx); err != nil {
		return err
	}
	// Replace the template in vcsim's registry by the same object with a corrected
	// CloneVM_Task (same reference), as govmomi's simulator/example_extend_test.go extends VMs.
	tpl, ok := v.model.Map().Get(vm.Reference()).(*simulator.VirtualMachine)
	if !ok {
		return fmt.Errorf("template %s is not a simulator VirtualMachine", vm.Reference())
	}
	v.model.Map().Put(&cloneSpecTemplate{tpl})
	return nil
}

// cloneSpecTemplate is a vcsim template whose clones get the extraConfig and instanceUuid of
// the clone spec. vcsim v0.53.0 (and v0.54.0) drops them: CloneVMTask (simulator/
// virtual_machine.go) copies spec.config's extraConfig, uuid, instanceUuid, numCPUs and memoryMB
// into a copy of the new VM's config spec ("dst, src := config, req.Spec.Config" copies the
// struct), so CreateVM never sees them. CAPV puts the bootstrap data there
// (pkg/services/govmomi/vcenter/clone.go: guestinfo.userdata) and the VSphereVM's UID as
// instanceUuid; without this the clone has neither (CAPV then finds the VM by inventory path).
type cloneSpecTemplate struct {
	*simulator.VirtualMachine
}

// CloneVMTask runs vcsim's clone, then sets what it dropped on the clone before the task the
// client waits for completes.
func (t *cloneSpecTemplate) CloneVMTask(ctx *simulator.Context, req *types.CloneVM_Task) soap.HasFault {
	res := t.VirtualMachine.CloneVMTask(ctx, req)
	spec := req.Spec.Config
	body, ok := res.(*methods.CloneVM_TaskBody)
	if spec == nil || !ok || body.Res == nil {
		return res
	}
	inner, ok := ctx.Map.Get(body.Res.Returnval).(*simulator.Task)
	if !ok {
		return res
	}
	outer := simulator.CreateTask(t.Self, "cloneVm", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		inner.Wait()
		if inner.Info.Error != nil {
			return nil, inner.Info.Error.Fault
		}
		ref, ok := inner.Info.Result.(types.ManagedObjectReference)
		if !ok {
			return nil, &types.InvalidState{}
		}
		clone, ok := ctx.Map.Get(ref).(*simulator.VirtualMachine)
		if !ok {
			return nil, &types.ManagedObjectNotFound{Obj: ref}
		}
		ctx.WithLock(clone, func() {
			var changes []types.PropertyChange
			if len(spec.ExtraConfig) > 0 {
				extra := append([]types.BaseOptionValue{}, clone.Config.ExtraConfig...)
				extra = append(extra, spec.ExtraConfig...)
				changes = append(changes, types.PropertyChange{Name: "config.extraConfig", Val: extra})
			}
			if spec.InstanceUuid != "" {
				changes = append(changes,
					types.PropertyChange{Name: "config.instanceUuid", Val: spec.InstanceUuid},
					types.PropertyChange{Name: "summary.config.instanceUuid", Val: spec.InstanceUuid})
			}
			if len(changes) > 0 {
				ctx.Update(clone, changes)
			}
		})
		return ref, nil
	})
	return &methods.CloneVM_TaskBody{Res: &types.CloneVM_TaskResponse{Returnval: outer.Run(ctx)}}
}

// startManager runs CAPV's manager binary against the harness' API server as CAPV's
// ServiceAccount, bound to the manager-role of CAPV's config/rbac/role.yaml, with the vCenter
// credentials in the file its --credentials-file flag reads (pkg/manager/options.go:
// "username" and "password" keys; config/base/credentials.yaml ships the same).
func startManager(ctx context.Context, h *harness.Harness, capvDir, bin, logDir string, vc *vcsim) (*framework.Process, error) {
	c := h.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: capvNamespace}}); err != nil {
		return nil, err
	}
	roleYAML, err := os.ReadFile(filepath.Join(capvDir, "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(bytes.TrimPrefix(roleYAML, []byte("---\n")), role); err != nil {
		return nil, fmt.Errorf("CAPV's role.yaml: %w", err)
	}
	role.Name = "capv-manager-role"
	if err := c.Create(ctx, role); err != nil {
		return nil, err
	}
	if err := c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "capv-manager-rolebinding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: capvServiceAccount, Namespace: capvNamespace}},
	}); err != nil {
		return nil, err
	}
	kubeconfig, err := h.Env.ImpersonatingKubeconfig("system:serviceaccount:" + capvNamespace + ":" + capvServiceAccount)
	if err != nil {
		return nil, err
	}
	kubeconfigPath := filepath.Join(logDir, "capv.kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	credentials := filepath.Join(logDir, "credentials.yaml")
	creds, err := yaml.Marshal(map[string]string{"username": vc.user, "password": vc.pass})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(credentials, creds, 0o600); err != nil {
		return nil, err
	}
	// CAPV's manager always starts its webhook server; nothing calls it here (no webhook
	// configurations are installed for CAPV's kinds).
	certDir := filepath.Join(logDir, "webhook-certs")
	if _, err := framework.WriteServingCertificate(certDir, "127.0.0.1"); err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = framework.FreePort(); err != nil {
			return nil, err
		}
	}
	local := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
	return framework.StartProcess("capv-manager", filepath.Join(logDir, "capv-manager.log"),
		[]string{"KUBECONFIG=" + kubeconfigPath, "POD_NAMESPACE=" + capvNamespace, "POD_NAME=capv-manager-smoke"},
		bin,
		"--leader-elect=false",
		"--credentials-file="+credentials,
		"--webhook-port="+strconv.Itoa(ports[0]),
		"--webhook-cert-dir="+certDir,
		"--health-addr="+local(ports[1]),
		"--diagnostics-address="+local(ports[2]),
		"--insecure-diagnostics",
	)
}

// moduleDir downloads module@version through the module proxy (or finds it in the module
// cache) and returns its folder. It runs outside the workspace: CAPV is not a dependency of
// the test module (it pins Cluster API v1.13).
func moduleDir(modVersion string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %v %s", modVersion, errors.Join(err, jerr), info.Error)
	}
	return info.Dir, nil
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
