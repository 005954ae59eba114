package vsphere_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/viper"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctl "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"

	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	cpsetup "github.com/kairos-capi/kairos-capi/controlplane/setup"
	"github.com/kairos-capi/kairos-capi/release/repo"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	"github.com/kairos-capi/kairos-capi/test/simnode"
	"github.com/kairos-capi/kairos-capi/test/vsphere"
)

// kubernetesVersion is what the simulated Kairos images ship (test/simnode).
const kubernetesVersion = "v1.36.3"

// stack is a management cluster running Cluster API, both Kairos providers and CAPV's own
// manager against a simulated vCenter whose VMs the guest bridge boots as Kairos nodes.
type stack struct {
	vc        *vsphere.VCSim
	h         *harness.Harness
	reg       *simnode.Registry
	manager   *framework.Process
	bridge    *vsphere.Bridge
	templates string // the control-plane release's folder, with the cluster templates
}

func startStack(t *testing.T) *stack {
	t.Helper()
	if capvDir == "" || capvBinary == "" {
		t.Fatal("CAPV's module folder and manager binary are unknown: TestMain sets them before it re-runs the tests in their network namespace")
	}
	ctx := context.Background()
	s := &stack{}
	var err error
	if s.vc, err = vsphere.StartVCSim(ctx); err != nil {
		t.Fatalf("vcsim: %v", err)
	}
	t.Cleanup(s.vc.Stop)

	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The cluster templates exactly as a release ships them, as clusterctl reads them.
	rel, err := repo.Build(repo.Options{Root: root, Provider: repo.ControlPlane, Version: "v0.1.0"})
	if err != nil {
		t.Fatalf("building the control-plane release: %v", err)
	}
	if s.templates, err = rel.Write(t.TempDir()); err != nil {
		t.Fatal(err)
	}

	if s.reg, err = simnode.NewRegistry(simnode.Options{AddressPrefix: vsphere.NodeAddressPrefix}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.reg.Close)
	capvCRDs, err := vsphere.CRDFiles(capvDir)
	if err != nil {
		t.Fatal(err)
	}
	cpCRDs, err := framework.ProjectCRDFiles("controlplane")
	if err != nil {
		t.Fatal(err)
	}
	s.h, err = harness.New(harness.Options{
		Registry:         s.reg,
		ExtraCRDFiles:    append(capvCRDs, cpCRDs...),
		ExtraWebhookDirs: []string{filepath.Join(root, "controlplane", "config", "webhook")},
		AddToScheme:      []func(*runtime.Scheme) error{controlplanev1.AddToScheme},
		Setup: []harness.SetupFunc{func(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache) error {
			c, err := harness.ProviderClient(mgr)
			if err != nil {
				return err
			}
			return cpsetup.Setup(ctx, mgr, cpsetup.Options{ClusterCache: cc, EtcdHealthInterval: 5 * time.Second, Client: c,
				RuntimeClient: harness.RuntimeClientFrom(ctx)})
		}},
		// Cluster API's RuntimeSDK and InPlaceUpdates gates and the Kairos update extension, for
		// the in-place upgrade; only the namespaces a scenario opts in see the extension.
		InPlaceUpdates: true,
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	t.Cleanup(func() { _ = s.h.Stop() })

	// CAPV's log is kept when a test fails, with a dump of the manager's goroutines (SIGQUIT):
	// a CAPV that stops reconciling says why only there.
	logDir, err := os.MkdirTemp("", "capv-manager-")
	if err != nil {
		t.Fatal(err)
	}
	if s.manager, err = vsphere.StartManager(ctx, s.h, vsphere.ManagerOptions{CAPVDir: capvDir, Binary: capvBinary, LogDir: logDir}, s.vc); err != nil {
		t.Fatalf("CAPV's manager: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("CAPV's manager, last lines:\n%s", tail(s.manager.Output(), 40))
			_ = syscall.Kill(s.manager.Pid(), syscall.SIGQUIT)
			_ = s.manager.Stop(10 * time.Second)
			t.Logf("CAPV's manager log, with its goroutines at the end, kept in %s", logDir)
			return
		}
		_ = s.manager.Stop(10 * time.Second)
		_ = os.RemoveAll(logDir)
	})

	if s.bridge, err = vsphere.StartBridge(ctx, vsphere.BridgeOptions{VCSim: s.vc, Registry: s.reg, Client: s.h.Client, Logger: framework.Logger()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("guest bridge:\n%s", strings.Join(s.bridge.Events(), "\n"))
		}
		s.bridge.Stop()
	})
	return s
}

// render runs `clusterctl generate cluster` on a flavor of the release with exactly these
// variables set, as a user does (environment variables), and returns its objects.
func (s *stack) render(t *testing.T, flavor string, values map[string]string) []unstructured.Unstructured {
	t.Helper()
	viper.Reset() // clusterctl keeps variables in viper's global instance
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	for k, v := range values {
		t.Setenv(k, v)
	}
	cfg := filepath.Join(t.TempDir(), "clusterctl.yaml")
	if err := os.WriteFile(cfg, []byte("providers: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := clusterctl.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := c.GetClusterTemplate(context.Background(), clusterctl.GetClusterTemplateOptions{
		ClusterName:       values["CLUSTER_NAME"],
		TargetNamespace:   values["NAMESPACE"],
		KubernetesVersion: values["KUBERNETES_VERSION"],
		URLSource:         &clusterctl.URLSourceOptions{URL: filepath.Join(s.templates, repo.TemplateFileName(flavor))},
	})
	if err != nil {
		t.Fatalf("clusterctl generate cluster --flavor %s: %v", flavor, err)
	}
	return tpl.Objs()
}

// TestVSphereFlavorOnCAPV: the shipped vSphere flavor, rendered as a user does, creates a Kairos
// cluster through CAPV's own controllers on vcsim, and lives its day 2 there, for k0s and k3s side
// by side (their clusters share nothing but the management cluster, vcsim and CAPV's manager):
//
//  1. a single-node control plane: CAPV clones the template and powers the VM on, the guest
//     bridge boots the VM's guestinfo as a Kairos node and reports its address through vcsim,
//     CAPV marks the VSphereMachine provisioned with vsphere://<BIOS UUID>, the Node carries that
//     provider ID, the KairosControlPlane becomes Available and its endpoint is the control-plane
//     VIP, held by the node; the MachineDeployment's worker joins through the VIP;
//  2. the control plane scaled 1 -> 3 (day2_test.go);
//  3. the control-plane VM that holds the VIP deleted in vCenter, remediated through a
//     MachineHealthCheck;
//  4. a rolling upgrade through a new VSphereMachineTemplate (another VM template, more memory):
//     one Machine at a time, Available and etcd healthy throughout;
//  5. the control plane scaled 3 -> 1;
//  6. the single node upgraded in place to the next minor version and Kairos image, on the same
//     VM (inplace_test.go);
//  7. the Cluster deleted: no VM left in vcsim, no object left behind.
func TestVSphereFlavorOnCAPV(t *testing.T) {
	s := startStack(t)
	// Rendered here, one after the other: clusterctl reads its variables from the environment
	// and keeps them in viper's global instance, which parallel subtests cannot share.
	dists := []string{"k0s", "k3s"}
	rendered := map[string][]unstructured.Unstructured{}
	for i, dist := range dists {
		rendered[dist] = s.render(t, "vsphere", flavorValues(s.vc, dist, vipOf(i)))
	}
	for i, dist := range dists {
		t.Run(dist, func(t *testing.T) {
			t.Parallel()
			c := s.createCluster(t, dist, vipOf(i), rendered[dist])
			c.scaleControlPlane(3)
			c.remediateVMDeletedInVCenter()
			c.rollOutNewTemplate()
			c.scaleControlPlane(1)
			c.upgradeInPlace()
			c.deleteCluster()
		})
	}
	t.Run("user data the guest cannot decode", func(t *testing.T) {
		t.Parallel()
		s.undecodableUserData(t)
	})
}

// vipOf is the control-plane VIP of the i-th cluster (CONTROL_PLANE_ENDPOINT_IP): of
// vsphere.LocalRange, outside the nodes' addresses (vsphere.NodeAddressPrefix).
func vipOf(i int) string { return fmt.Sprintf("198.18.0.%d", 100+i) }

// flavorValues are the variables a user sets for the vSphere flavor, with the simulated
// vCenter's inventory.
func flavorValues(vc *vsphere.VCSim, dist, vip string) map[string]string {
	return vsphere.FlavorVariables(vc, "kairos-"+dist, "capv-"+dist, dist, kubernetesVersion, vip, "kairos-on-capv")
}

// capvCluster is one Kairos cluster of the vSphere flavor on CAPV.
type capvCluster struct {
	s              *stack
	t              *testing.T
	ctx            context.Context
	dist, ns, name string
	vip            string
	cluster        *clusterv1.Cluster
	kcp            *controlplanev1.KairosControlPlane
	// wc is the simulated workload cluster at the Cluster's endpoint.
	wc *simnode.Cluster
}

// createCluster applies the rendered flavor and proves the single-node control plane and the
// worker (step 1 of TestVSphereFlavorOnCAPV).
func (s *stack) createCluster(t *testing.T, dist, vip string, objs []unstructured.Unstructured) *capvCluster {
	ctx := framework.Context(t)
	c := &capvCluster{s: s, t: t, ctx: ctx, dist: dist, ns: "capv-" + dist, name: "kairos-" + dist, vip: vip,
		cluster: &clusterv1.Cluster{}, kcp: &controlplanev1.KairosControlPlane{}}
	cl := s.h.Client
	start := time.Now()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c.ns}}); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i := range objs {
		kinds = append(kinds, objs[i].GetKind()+"/"+objs[i].GetName())
		if err := cl.Create(ctx, &objs[i]); err != nil {
			t.Fatalf("creating %s %s: %v", objs[i].GetKind(), objs[i].GetName(), err)
		}
	}
	t.Logf("applied the rendered vSphere flavor (%s): %s", dist, strings.Join(kinds, ", "))

	var machine *clusterv1.Machine
	var guest vsphere.GuestStatus
	last := ""
	framework.Eventually(t, waitControlPlane, func() error {
		if exited, err := s.manager.Exited(); exited {
			t.Fatalf("CAPV's manager exited: %v", err)
		}
		state, done, err := s.observe(ctx, c.ns, c.name, c.cluster, c.kcp, &machine, &guest)
		if err != nil {
			t.Fatal(err)
		}
		if state != last {
			t.Logf("%5.1fs %s", time.Since(start).Seconds(), state)
			last = state
		}
		if !done {
			return fmt.Errorf("the control plane is not Available yet: %s", state)
		}
		return nil
	})

	// What is proven, checked once more, explicitly.
	wantID := "vsphere://" + guest.UUID
	if machine.Spec.ProviderID != wantID {
		t.Errorf("Machine provider ID %q, want %q (CAPV's spelling of the VM's BIOS UUID)", machine.Spec.ProviderID, wantID)
	}
	vm := newCAPVObject("VSphereMachine")
	if err := cl.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: machine.Spec.InfrastructureRef.Name}, vm); err != nil {
		t.Fatal(err)
	}
	if id, _, _ := unstructured.NestedString(vm.Object, "spec", "providerID"); id != wantID {
		t.Errorf("VSphereMachine provider ID %q, want %q", id, wantID)
	}
	addrs, _, _ := unstructured.NestedSlice(vm.Object, "status", "addresses")
	if !strings.Contains(fmt.Sprint(addrs), guest.Node.IP()) {
		t.Errorf("VSphereMachine addresses %v lack the address the guest reported, %s", addrs, guest.Node.IP())
	}
	c.wc = s.reg.ClusterAt(c.cluster.Spec.ControlPlaneEndpoint.Host, c.cluster.Spec.ControlPlaneEndpoint.Port)
	if c.wc == nil {
		t.Fatalf("no workload cluster runs at the Cluster's endpoint %v", c.cluster.Spec.ControlPlaneEndpoint)
	}
	node := &corev1.Node{}
	if err := c.wc.AdminClient().Get(ctx, client.ObjectKey{Name: machine.Status.NodeRef.Name}, node); err != nil {
		t.Fatal(err)
	}
	if node.Spec.ProviderID != wantID {
		t.Errorf("Node %s provider ID %q, want %q", node.Name, node.Spec.ProviderID, wantID)
	}
	if node.Status.NodeInfo.SystemUUID != guest.UUID {
		t.Errorf("Node %s systemUUID %q, want the VM's BIOS UUID %s", node.Name, node.Status.NodeInfo.SystemUUID, guest.UUID)
	}
	if node.Name != guest.MetadataHostname {
		t.Errorf("Node %s, but CAPV's metadata names the VM %q (CAPV deletes the Node of that name with the VM)", node.Name, guest.MetadataHostname)
	}
	if c.cluster.Spec.ControlPlaneEndpoint.Host != vip {
		t.Errorf("Cluster endpoint %v, want the VIP %s", c.cluster.Spec.ControlPlaneEndpoint, vip)
	}
	if h := c.wc.VIPHolder(); h == nil || h != guest.Node {
		t.Errorf("the VIP %s is held by %v, want the control-plane node %v", vip, h, guest.Node)
	}
	meta, err := guest.Node.ReadFile(vsphere.MetadataPath)
	if err != nil || !strings.Contains(string(meta), "local-hostname: \""+guest.MetadataHostname+"\"") {
		t.Errorf("the node's %s (%v):\n%s", vsphere.MetadataPath, err, meta)
	}
	// What CAPV wrote to guestinfo.userdata (base64, guestinfo.userdata.encoding=base64) is
	// the bootstrap Secret's value, byte for byte, as the guest's datasource decoded it.
	bootstrap := &corev1.Secret{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: ptr.Deref(machine.Spec.Bootstrap.DataSecretName, "")}, bootstrap); err != nil {
		t.Fatal(err)
	}
	if userData, err := guest.Node.ReadFile(vsphere.UserDataPath); err != nil || string(userData) != string(bootstrap.Data["value"]) {
		t.Errorf("the node's %s (%v) is not the bootstrap Secret %s's value (%d bytes, node %d)", vsphere.UserDataPath, err, bootstrap.Name, len(bootstrap.Data["value"]), len(userData))
	}
	// CAPV logged into vcsim (SOAP and the REST tagging endpoint, with the SHA-256 thumbprint).
	vsc := newCAPVObject("VSphereCluster")
	if err := cl.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: c.name}, vsc); err != nil {
		t.Fatal(err)
	}
	provisioned, _, _ := unstructured.NestedBool(vsc.Object, "status", "initialization", "provisioned")
	if v, _, _ := unstructured.NestedString(vsc.Object, "status", "vCenterVersion"); !provisioned || v != s.vc.Version {
		t.Errorf("VSphereCluster %s: provisioned %v, vCenterVersion %q (vcsim is %s); conditions [%s]", vsc.GetName(), provisioned, v, s.vc.Version, conditionSummary(vsc))
	}
	if f := guest.Node.BootFailures(); len(f) > 0 {
		t.Logf("%s: the control-plane node retried %d times before it ran: %q", dist, len(f), f)
	}
	t.Logf("%s: the vSphere flavor's control plane is Available through CAPV after %s: VM %s (BIOS UUID %s, MAC %s) at %s, Node %s with %s, endpoint %s held by it",
		dist, time.Since(start).Round(time.Second), machine.Spec.InfrastructureRef.Name, guest.UUID, guest.MAC, guest.Node.IP(), node.Name, node.Spec.ProviderID, vip)
	for _, want := range []string{"Applied bootstrap data to VM clone spec", "VSphereVM is ready", "Updating providerID on VSphereMachine"} {
		if !strings.Contains(s.manager.Output(), want) {
			t.Errorf("CAPV's manager never logged %q", want)
		}
	}
	// The control plane's etcd health reached the member at the address vcsim reported: the
	// Machine's addresses are CAPV's copy of the VM's guest.net.
	if !strings.Contains(fmt.Sprint(machine.Status.Addresses), guest.Node.IP()) {
		t.Errorf("Machine addresses %v lack the guest's %s", machine.Status.Addresses, guest.Node.IP())
	}
	if t.Failed() {
		t.FailNow()
	}

	// The MachineDeployment's worker: its own VM from the flavor's md-0 VSphereMachineTemplate,
	// joining the cluster through the VIP.
	start = time.Now()
	var worker *clusterv1.Machine
	var workerGuest vsphere.GuestStatus
	framework.Eventually(t, waitControlPlane, func() error {
		list := &clusterv1.MachineList{}
		if err := cl.List(ctx, list, client.InNamespace(c.ns), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: c.name + "-md-0"}); err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d worker Machines, want 1", len(list.Items))
		}
		worker = &list.Items[0]
		var on bool
		if workerGuest, on = s.bridge.Guest(worker.Spec.InfrastructureRef.Name); !on || workerGuest.Node == nil {
			return fmt.Errorf("worker VM %s: powered on %v, guest %+v", worker.Spec.InfrastructureRef.Name, on, workerGuest)
		}
		if st := workerGuest.Node.Status(); st.Phase == simnode.PhaseRefused {
			t.Fatalf("the worker's node refused: %s: %s", st.Reason, st.Message)
		}
		if !worker.Status.NodeRef.IsDefined() || worker.Spec.ProviderID != "vsphere://"+workerGuest.UUID {
			return fmt.Errorf("worker Machine %s: providerID %q nodeRef %q phase %s; node %s", worker.Name, worker.Spec.ProviderID, worker.Status.NodeRef.Name, worker.Status.Phase, workerGuest.Node)
		}
		n := &corev1.Node{}
		if err := c.wc.AdminClient().Get(ctx, client.ObjectKey{Name: worker.Status.NodeRef.Name}, n); err != nil {
			return err
		}
		if n.Spec.ProviderID != worker.Spec.ProviderID {
			return fmt.Errorf("worker Node %s provider ID %q, Machine %q", n.Name, n.Spec.ProviderID, worker.Spec.ProviderID)
		}
		return nil
	})
	t.Logf("%s: worker Machine %s joined after %s: VM %s at %s, Node %s with %s", dist, worker.Name, time.Since(start).Round(time.Second),
		worker.Spec.InfrastructureRef.Name, workerGuest.Node.IP(), worker.Status.NodeRef.Name, worker.Spec.ProviderID)
	return c
}

// undecodableUserData: a Machine whose bootstrap Secret is not cloud-config (format ignition)
// gets no guestinfo.userdata from CAPV; the VM's Kairos datasource finds no user data it can
// read, boots without Kubernetes and reports nothing, and CAPV waits for an address with a
// reason one can read.
func (s *stack) undecodableUserData(t *testing.T) {
	ctx := context.Background()
	c := s.h.Client
	const ns, name = "capv-refusal", "refusal"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VSphereCluster",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{"server": s.vc.Host, "thumbprint": s.vc.Thumbprint,
				"controlPlaneEndpoint": map[string]any{"host": "198.18.0.110", "port": int64(6443)}},
		}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "VSphereCluster", Name: name}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-bootstrap", Namespace: ns,
			Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
			Type: clusterv1.ClusterSecretType,
			Data: map[string][]byte{"value": []byte(`{"ignition":{"version":"3.4.0"}}`), "format": []byte("ignition")}},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VSphereMachine",
			"metadata": map[string]any{"name": name + "-0", "namespace": ns},
			"spec": map[string]any{"template": vsphere.TemplateName, "datacenter": vsphere.Datacenter, "datastore": vsphere.Datastore,
				"folder": vsphere.Folder, "resourcePool": vsphere.ResourcePool, "cloneMode": "fullClone", "numCPUs": int64(2), "memoryMiB": int64(2048),
				"network": map[string]any{"devices": []any{map[string]any{"networkName": vsphere.Network, "dhcp4": true}}}},
		}},
		&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
			Spec: clusterv1.MachineSpec{ClusterName: name, Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To(name + "-bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "VSphereMachine", Name: name + "-0"}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	var g vsphere.GuestStatus
	framework.Eventually(t, waitControlPlane, func() error {
		var on bool
		if g, on = s.bridge.Guest(name + "-0"); !on {
			return fmt.Errorf("VM %s-0 is not powered on yet", name)
		}
		return nil
	})
	if g.Refused == nil || g.Node != nil || !strings.Contains(g.Refused.Error(), "has no guestinfo.userdata.encoding key") {
		t.Fatalf("the guest of a VM with ignition data: node %v, refused %v; want no node, refused for want of guestinfo.userdata", g.Node, g.Refused)
	}
	t.Logf("the guest refused: %v", g.Refused)
	// CAPV keeps waiting for an address: the VSphereMachine is not provisioned.
	vsm := newCAPVObject("VSphereMachine")
	framework.Consistently(t, 15*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-0"}, vsm); err != nil {
			return err
		}
		if p, _, _ := unstructured.NestedBool(vsm.Object, "status", "initialization", "provisioned"); p {
			return fmt.Errorf("the VSphereMachine is provisioned although its guest reported no address: %s", conditionSummary(vsm))
		}
		return nil
	})
	t.Logf("CAPV waits: VSphereMachine %s conditions [%s]", vsm.GetName(), conditionSummary(vsm))
}

// observe reads the control plane's state once and says whether it is done: the one Machine has
// its provider ID and node, the node runs, the KairosControlPlane is Available.
func (s *stack) observe(ctx context.Context, ns, name string, cluster *clusterv1.Cluster, kcp *controlplanev1.KairosControlPlane, machine **clusterv1.Machine, guest *vsphere.GuestStatus) (string, bool, error) {
	c := s.h.Client
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cluster); err != nil {
		return "", false, err
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-control-plane"}, kcp); err != nil {
		return "", false, err
	}
	machines := &clusterv1.MachineList{}
	if err := c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.MachineControlPlaneLabel: ""}); err != nil {
		return "", false, err
	}
	parts := []string{fmt.Sprintf("KCP Available=%s", condition(kcp, controlplanev1.AvailableCondition))}
	var m *clusterv1.Machine
	if len(machines.Items) == 1 {
		m = &machines.Items[0]
	}
	*machine = m
	if m == nil {
		parts = append(parts, fmt.Sprintf("%d control-plane Machines", len(machines.Items)))
		return strings.Join(parts, "; "), false, nil
	}
	parts = append(parts, fmt.Sprintf("Machine %s providerID=%q nodeRef=%q phase=%s", m.Name, m.Spec.ProviderID, m.Status.NodeRef.Name, m.Status.Phase))
	vmName := m.Spec.InfrastructureRef.Name
	vsm := newCAPVObject("VSphereMachine")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: vmName}, vsm); err == nil {
		p, _, _ := unstructured.NestedBool(vsm.Object, "status", "initialization", "provisioned")
		parts = append(parts, fmt.Sprintf("VSphereMachine provisioned=%v [%s]", p, conditionSummary(vsm)))
	}
	g, ok := s.bridge.Guest(vmName)
	*guest = g
	switch {
	case !ok:
		parts = append(parts, "VM not powered on")
	case g.Refused != nil:
		return "", false, fmt.Errorf("the guest of VM %s runs no node: %v", vmName, g.Refused)
	case g.Node != nil:
		st := g.Node.Status()
		if st.Phase == simnode.PhaseRefused {
			return "", false, fmt.Errorf("the Kairos node of VM %s refused to start: %s: %s", vmName, st.Reason, st.Message)
		}
		parts = append(parts, fmt.Sprintf("node %s %s/%s reported=%q", st.NodeName, st.Phase, st.Reason, g.ReportedIP))
	}
	parts = append(parts, fmt.Sprintf("Machine EtcdMemberHealthy=%s KCP EtcdClusterHealthy=%s",
		condition(m, controlplanev1.MachineEtcdMemberHealthyCondition), condition(kcp, controlplanev1.EtcdClusterHealthyCondition)))
	done := ok && g.Node != nil && g.Node.Status().Phase == simnode.PhaseRunning &&
		m.Spec.ProviderID != "" && m.Status.NodeRef.IsDefined() && conditions.IsTrue(kcp, controlplanev1.AvailableCondition) &&
		conditions.IsTrue(m, controlplanev1.MachineEtcdMemberHealthyCondition) && conditions.IsTrue(kcp, controlplanev1.EtcdClusterHealthyCondition)
	return strings.Join(parts, "; "), done, nil
}

func condition(obj conditions.Getter, t string) string {
	c := conditions.Get(obj, t)
	if c == nil {
		return "unset"
	}
	if c.Reason != "" {
		return fmt.Sprintf("%s(%s)", c.Status, c.Reason)
	}
	return string(c.Status)
}

func conditionSummary(u *unstructured.Unstructured) string {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var parts []string
	for _, item := range list {
		m, _ := item.(map[string]any)
		parts = append(parts, fmt.Sprintf("%v=%v(%v)", m["type"], m["status"], m["reason"]))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func tail(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
