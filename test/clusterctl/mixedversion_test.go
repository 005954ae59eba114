package clusterctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	clusterctlclient "sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/util/conditions"

	bootstrapv1 "github.com/kairos-capi/kairos-capi/bootstrap/api/v1beta2"
	controlplanev1 "github.com/kairos-capi/kairos-capi/controlplane/api/v1beta2"
	"github.com/kairos-capi/kairos-capi/test/clusterctlrepo"
	"github.com/kairos-capi/kairos-capi/test/framework"
	"github.com/kairos-capi/kairos-capi/test/harness"
	infrav1 "github.com/kairos-capi/kairos-capi/test/infrastructure/api/v1beta2"
)

// settle is how long nothing may change after a provider restarted: its first reconciliation
// of every object happens right after its caches sync.
const settle = 8 * time.Second

// kubernetesVersionSim is the version of the simulated nodes' Kubernetes (the workload API
// servers are built from source at it).
const kubernetesVersionSim = "v1.36.3"

// TestMixedVersions runs the previous release of each provider, built from git history
// (release/releases.yaml: binary and clusterctl repository of that commit), with this tree's
// release (newVersion) of the other, and upgrades one provider at a time with clusterctl, in
// both orders. Cluster API's core controllers and the simulation infrastructure run in this
// process, the providers as processes of their installed release under their shipped RBAC, and
// a k0s cluster lives on simulated Kairos nodes the whole time (one distribution is enough:
// what differs between releases is the providers' objects, not the nodes):
//
//	clusterctl init (both at their previous release) → cluster: 1 control plane, 1 worker
//	→ upgrade the first provider → scale the control plane to 3 (the mixed pair at work)
//	→ upgrade the second provider → roll the control plane out (rollout.after) → delete it
//
// At each upgrade only that provider's components are replaced (the other's and every CRD keep
// their UIDs), the inventory follows, and nothing rolls: once the new manager runs, no Machine,
// KairosConfig or Secret of the cluster is added, removed, replaced or changed, and the control
// plane stays up to date. After the bootstrap-first order, the bootstrap provider is upgraded to
// outOfPolicyVersion, outside the version-skew policy of control plane newVersion: the control
// plane says so in BootstrapProviderCompatible and, asked to scale, creates and deletes nothing;
// a goreleaser snapshot build of the same control plane (vX.Y.Z-dev+<commit>, no release) then
// takes over and, exempt from the policy, scales.
func TestMixedVersions(t *testing.T) {
	// Each order takes a slot of its own (below); the test itself only starts them.
	t.Parallel()
	for _, first := range []providerSpec{bootstrapProvider, controlPlaneProvider} {
		second := controlPlaneProvider
		if first == controlPlaneProvider {
			second = bootstrapProvider
		}
		t.Run(first.Name+" first", func(t *testing.T) {
			slots.Parallel(t)
			x := startMixed(t, first.Name+"-first", previousVersion(t, bootstrapProvider), previousVersion(t, controlPlaneProvider))
			x.createCluster(t, 1)
			start := time.Now()
			x.settledWithin(t, 1, firstNodeRefLimit)
			t.Logf("cluster ready %s after creation, with %s %s and %s %s", time.Since(start).Round(time.Second),
				first.Name, previousVersion(t, first), second.Name, previousVersion(t, second))

			x.upgrade(t, first, newVersion)
			x.scale(t, 3)
			x.upgrade(t, second, newVersion)
			x.rollout(t)
			if first == bootstrapProvider {
				x.outOfPolicy(t)
			}
			start = time.Now()
			if err := x.cluster.Delete(framework.Context(t), harness.DefaultDeleteTimeout); err != nil {
				t.Fatalf("deleting the cluster: %v", err)
			}
			t.Logf("cluster deleted in %s", time.Since(start).Round(time.Second))
		})
	}
}

// mixedManagement is a management cluster running Cluster API and the simulation
// infrastructure in this process and both Kairos providers as processes of their installed
// release, with one cluster.
type mixedManagement struct {
	*management
	h        *harness.Harness
	managers map[string]*managerProcess
	ns       string
	kcp      *controlplanev1.KairosControlPlane
	cluster  *harness.TestCluster
	// owner is the test that owns the manager processes (they outlive subtests).
	owner *testing.T
}

// startMixed starts a management cluster with both providers at the given releases.
func startMixed(t *testing.T, name, bootstrapVersion, controlPlaneVersion string) *mixedManagement {
	t.Helper()
	m := startManagement(t, name)
	o := m.initOptions(newVersion, true)
	o.BootstrapProviders = []string{providerName + ":" + bootstrapVersion}
	o.ControlPlaneProviders = []string{providerName + ":" + controlPlaneVersion}
	m.init(t, o)
	return m.runProviders(t, harness.Options{Env: m.Env, NoBootstrapProvider: true}, nil)
}

// runProviders runs, on a management cluster clusterctl initialised, a garbage collector,
// Cluster API and the simulation infrastructure in this process (a harness with opts), and both
// Kairos providers as processes of their installed release. beforeManagers, if not nil, runs
// once the harness does and before the providers start.
func (m *management) runProviders(t *testing.T, opts harness.Options, beforeManagers func(*mixedManagement)) *mixedManagement {
	t.Helper()
	// A real management cluster collects garbage: Machines' KairosConfigs and data go with them.
	kcm, err := m.Env.StartControllerManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kcm.Stop(10 * time.Second) })
	// Cluster API's webhooks are served by the harness' manager in this process.
	wh := m.Env.WebhookInstallOptions
	if err := clusterctlrepo.PointWebhooks(framework.Context(t), m.Client, "cluster-api", wh.LocalServingPort, wh.LocalServingCAData, harness.ServesCAPIWebhook); err != nil {
		t.Fatal(err)
	}
	x := &mixedManagement{management: m, owner: t, managers: map[string]*managerProcess{}}
	x.h = harness.Start(t, opts)
	if beforeManagers != nil {
		beforeManagers(x)
	}
	for _, p := range []providerSpec{bootstrapProvider, controlPlaneProvider} {
		x.managers[p.Name] = m.startManager(t, p)
	}
	return x
}

// createCluster creates a k0s cluster with the given number of control-plane Machines and a
// MachineDeployment of one worker.
func (x *mixedManagement) createCluster(t *testing.T, replicas int32) {
	t.Helper()
	x.createControlPlaneCluster(t, "mixed", replicas, nil)
	if _, err := x.cluster.CreateMachineDeployment(framework.Context(t), "workers", harness.MachineDeploymentOptions{
		Replicas: 1, Version: kubernetesVersionSim, Config: bootstrapv1.KairosConfigSpec{UserPassword: testUserPassword},
	}); err != nil {
		t.Fatal(err)
	}
}

// testUserPassword is the nodes' user password in this package's clusters.
const testUserPassword = "mixed-versions-password"

// createControlPlaneCluster creates a k0s cluster named name whose KairosControlPlane has the
// given number of Machines; mutate, when not nil, shapes the control plane's spec.
func (x *mixedManagement) createControlPlaneCluster(t *testing.T, name string, replicas int32, mutate func(*controlplanev1.KairosControlPlaneSpec)) {
	t.Helper()
	ctx := framework.Context(t)
	x.ns = x.h.NewNamespace(t)
	// Deleted by the test itself (deleteCluster) while both managers run: cleanups would stop
	// the managers of the last upgrade first.
	var err error
	x.cluster, err = x.h.CreateCluster(ctx, x.ns, name, harness.ClusterOptions{ControlPlaneRef: &clusterv1.ContractVersionedObjectReference{
		APIGroup: controlplanev1.GroupVersion.Group, Kind: "KairosControlPlane", Name: name,
	}})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &infrav1.KairosSimMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: x.ns, Name: name + "-cp"}}
	if err := x.Client.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	x.kcp = &controlplanev1.KairosControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: x.ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: name}},
		Spec: controlplanev1.KairosControlPlaneSpec{
			Replicas:     ptr.To(replicas),
			Version:      kubernetesVersionSim,
			Distribution: bootstrapv1.DistributionK0s,
			MachineTemplate: controlplanev1.KairosControlPlaneMachineTemplate{Spec: controlplanev1.KairosControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "KairosSimMachineTemplate", Name: tmpl.Name},
			}},
			KairosConfigSpec: bootstrapv1.KairosConfigSpec{UserPassword: testUserPassword},
		},
	}
	if mutate != nil {
		mutate(&x.kcp.Spec)
	}
	if err := x.Client.Create(ctx, x.kcp); err != nil {
		t.Fatal(err)
	}
}

// firstNodeRefLimit is how long the first control-plane Machine of a cluster created with the
// previous releases may take to settle. v0.1.0's control plane reports itself initialized only
// once a Machine has a nodeRef, and Cluster API's Machine controller watches a workload
// cluster's Nodes only once it is initialized: the first Machine gets its nodeRef from a
// Machine reconcile that finds its Node with the provider ID the bootstrap provider gave it.
// When the last Machine event comes before the Node's update reached Cluster API's cache, none
// follows until the periodic resync (Cluster API's --sync-period, 10 minutes, jittered up to
// 11, the harness' too): so it goes on a real management cluster, seen twice in full runs
// beside the rest of the test module. Fixed since in the control plane, which reports itself
// initialized once the workload API answers (prerequisites.go reconcileInitialized), so every
// later settle keeps its 4 minutes.
const firstNodeRefLimit = 12 * time.Minute

// settled waits until the control plane has n running, up-to-date Machines with nodes, is
// available with nothing rolling out or scaling, and the worker runs.
func (x *mixedManagement) settled(t *testing.T, n int) []clusterv1.Machine {
	t.Helper()
	return x.settledWithin(t, n, 4*time.Minute)
}

// settledWithin is settled with a time limit.
func (x *mixedManagement) settledWithin(t *testing.T, n int, limit time.Duration) []clusterv1.Machine {
	t.Helper()
	ctx := framework.Context(t)
	var machines []clusterv1.Machine
	framework.Eventually(t, limit, func() error {
		kcp := &controlplanev1.KairosControlPlane{}
		if err := x.Client.Get(ctx, client.ObjectKeyFromObject(x.kcp), kcp); err != nil {
			return err
		}
		list := &clusterv1.MachineList{}
		if err := x.Client.List(ctx, list, client.InNamespace(x.ns), client.MatchingLabels{controlplanev1.ControlPlaneNameLabel: kcp.Name}); err != nil {
			return err
		}
		machines = list.Items
		if len(machines) != n {
			return fmt.Errorf("%d control-plane Machines, want %d; control plane conditions: %s", len(machines), n, conditionSummary(kcp))
		}
		for _, m := range machines {
			if !m.DeletionTimestamp.IsZero() || m.Status.Phase != string(clusterv1.MachinePhaseRunning) || !m.Status.NodeRef.IsDefined() {
				// What its simulated node is doing tells a node that never registered (its
				// document, its join, its etcd member) from a slow management cluster.
				node := "no simulated node"
				if sim := x.h.Registry.NodeFor(x.ns, m.Spec.InfrastructureRef.Name); sim != nil {
					node = fmt.Sprintf("simulated node %+v", sim.Status())
				}
				return fmt.Errorf("control-plane Machine %s is %s (NodeHealthy: %s); %s", m.Name, m.Status.Phase, conditionMessage(&m, clusterv1.MachineNodeHealthyCondition), node)
			}
		}
		st := kcp.Status
		if ptr.Deref(st.ReadyReplicas, -1) != int32(n) || ptr.Deref(st.UpToDateReplicas, -1) != int32(n) || ptr.Deref(st.AvailableReplicas, -1) != int32(n) {
			return fmt.Errorf("control plane ready %v up-to-date %v available %v, want %d", ptr.Deref(st.ReadyReplicas, -1), ptr.Deref(st.UpToDateReplicas, -1), ptr.Deref(st.AvailableReplicas, -1), n)
		}
		for typ, want := range map[string]bool{controlplanev1.AvailableCondition: true, controlplanev1.MachinesUpToDateCondition: true,
			controlplanev1.RollingOutCondition: false, controlplanev1.ScalingUpCondition: false, controlplanev1.ScalingDownCondition: false} {
			if conditions.IsTrue(kcp, typ) != want {
				return fmt.Errorf("control plane condition %s is %+v, want %v", typ, conditions.Get(kcp, typ), want)
			}
		}
		mds := &clusterv1.MachineDeploymentList{}
		if err := x.Client.List(ctx, mds, client.InNamespace(x.ns)); err != nil {
			return err
		}
		for _, md := range mds.Items {
			if ptr.Deref(md.Status.ReadyReplicas, 0) != ptr.Deref(md.Spec.Replicas, 0) {
				return fmt.Errorf("MachineDeployment %s has %d of %d ready", md.Name, ptr.Deref(md.Status.ReadyReplicas, 0), ptr.Deref(md.Spec.Replicas, 0))
			}
		}
		return nil
	})
	return machines
}

// upgrade upgrades one provider with clusterctl upgrade apply while the cluster runs, starts the
// new release's manager in place of the old one, and checks that only the provider's components
// changed and nothing rolled.
func (x *mixedManagement) upgrade(t *testing.T, p providerSpec, version string) {
	t.Helper()
	ctx := framework.Context(t)
	other := controlPlaneProvider
	if p == controlPlaneProvider {
		other = bootstrapProvider
	}
	from := x.providers(t)[p.Namespace+"/"+p.Label].Version
	before := x.state(t, x.ns)
	otherObjects, ownObjects, crds := x.componentUIDs(t, other), x.componentUIDs(t, p), x.crdUIDs(t, p)

	// clusterctl scales the Deployment to zero first: the old manager goes away.
	x.managers[p.Name].stop(t)
	o := clusterctlclient.ApplyUpgradeOptions{Kubeconfig: x.Kubeconfig}
	ref := []string{p.Namespace + "/" + providerName + ":" + version}
	if p.Type == clusterctlv1.BootstrapProviderType {
		o.BootstrapProviders = ref
	} else {
		o.ControlPlaneProviders = ref
	}
	start := time.Now()
	if err := x.Clusterctl.ApplyUpgrade(ctx, o); err != nil {
		t.Fatalf("clusterctl upgrade apply %s: %v", ref[0], err)
	}
	t.Logf("clusterctl upgrade apply %s (from %s) took %s", ref[0], from, time.Since(start).Round(100*time.Millisecond))

	if got := x.providers(t)[p.Namespace+"/"+p.Label].Version; got != version {
		t.Errorf("inventory: %s is at %q, want %s", p.Label, got, version)
	}
	checkInstalledProvider(t, x.management, p, version)
	checkCRDs(t, x.management, p)
	if now := x.componentUIDs(t, other); !equalUIDs(now, otherObjects) {
		t.Errorf("upgrading %s touched %s's components:\nbefore %v\nafter  %v", p.Label, other.Label, otherObjects, now)
	}
	if now := x.componentUIDs(t, p); equalUIDs(now, ownObjects) || deploymentUID(now) == deploymentUID(ownObjects) {
		t.Errorf("clusterctl upgrade apply did not replace %s's components (Deployment uid %s)", p.Label, deploymentUID(now))
	}
	if now := x.crdUIDs(t, p); !equalUIDs(now, crds) {
		t.Errorf("upgrading %s replaced its CRDs (objects would be lost):\nbefore %v\nafter  %v", p.Label, crds, now)
	}
	x.managers[other.Name].checkRunning(t)

	// The new release's manager starts; nothing of the cluster changes.
	x.managers[p.Name] = x.startManagerUntil(t, x.owner, p)
	framework.Consistently(t, settle, func() error {
		if diffs := compareState(before, x.state(t, x.ns), true); len(diffs) > 0 {
			return fmt.Errorf("after upgrading %s from %s to %s:\n%s", p.Label, from, version, strings.Join(diffs, "\n"))
		}
		kcp := &controlplanev1.KairosControlPlane{}
		if err := x.Client.Get(ctx, client.ObjectKeyFromObject(x.kcp), kcp); err != nil {
			return err
		}
		if conditions.IsTrue(kcp, controlplanev1.RollingOutCondition) || ptr.Deref(kcp.Status.UpToDateReplicas, -1) != ptr.Deref(kcp.Spec.Replicas, 0) {
			return fmt.Errorf("after upgrading %s the control plane wants to roll out: %+v", p.Label, conditions.Get(kcp, controlplanev1.RollingOutCondition))
		}
		return x.configsReady(x.ns)
	})
}

// scale sets the control plane's replicas and waits until they run.
func (x *mixedManagement) scale(t *testing.T, n int) {
	t.Helper()
	start := time.Now()
	x.updateControlPlane(t, func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To(int32(n)) })
	x.settled(t, n)
	t.Logf("scaled to %d control-plane Machines in %s", n, time.Since(start).Round(time.Second))
}

// rollout replaces every control-plane Machine (rollout.after now) and waits for the new ones.
func (x *mixedManagement) rollout(t *testing.T) {
	t.Helper()
	start := time.Now()
	before := x.settled(t, 3)
	x.updateControlPlane(t, func(s *controlplanev1.KairosControlPlaneSpec) { s.Rollout.After = metav1.Now() })
	framework.Eventually(t, 5*time.Minute, func() error {
		after := x.settled(t, 3)
		for _, b := range before {
			for _, a := range after {
				if a.Name == b.Name {
					return fmt.Errorf("control-plane Machine %s not replaced yet", a.Name)
				}
			}
		}
		return nil
	})
	t.Logf("rolled out 3 control-plane Machines in %s", time.Since(start).Round(time.Second))
}

// outOfPolicy upgrades the bootstrap provider to a release outside the control plane's policy
// and asks the control plane to scale: it refuses with the condition, and nothing is created or
// deleted.
func (x *mixedManagement) outOfPolicy(t *testing.T) {
	t.Helper()
	ctx := framework.Context(t)
	x.upgrade(t, bootstrapProvider, outOfPolicyVersion)
	before := x.state(t, x.ns)
	x.updateControlPlane(t, func(s *controlplanev1.KairosControlPlaneSpec) { s.Replicas = ptr.To[int32](5) })
	want := fmt.Sprintf("bootstrap provider %s is outside the version-skew policy of control-plane provider %s", outOfPolicyVersion, newVersion)
	framework.Eventually(t, time.Minute, func() error {
		kcp := &controlplanev1.KairosControlPlane{}
		if err := x.Client.Get(ctx, client.ObjectKeyFromObject(x.kcp), kcp); err != nil {
			return err
		}
		c := conditions.Get(kcp, controlplanev1.BootstrapProviderCompatibleCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != controlplanev1.BootstrapProviderNotCompatibleReason || !strings.Contains(c.Message, want) {
			return fmt.Errorf("BootstrapProviderCompatible = %+v, want False/%s with %q", c, controlplanev1.BootstrapProviderNotCompatibleReason, want)
		}
		return nil
	})
	framework.Consistently(t, 10*time.Second, func() error {
		if diffs := compareState(before, x.state(t, x.ns), true); len(diffs) > 0 {
			return fmt.Errorf("outside the policy:\n%s", strings.Join(diffs, "\n"))
		}
		return nil
	})

	// A goreleaser snapshot of the control plane is no release: the policy exempts it and checks
	// only the contract, so it works with the released bootstrap provider that the release
	// refused, and the pending scale-up proceeds.
	snapshot := snapshotVersion(t, newVersion)
	x.managers[controlPlaneProvider.Name].stop(t)
	x.managers[controlPlaneProvider.Name] = x.startManagerBuild(t, x.owner, controlPlaneProvider, snapshot)
	framework.Eventually(t, time.Minute, func() error {
		kcp := &controlplanev1.KairosControlPlane{}
		if err := x.Client.Get(ctx, client.ObjectKeyFromObject(x.kcp), kcp); err != nil {
			return err
		}
		if !conditions.IsTrue(kcp, controlplanev1.BootstrapProviderCompatibleCondition) {
			return fmt.Errorf("control plane %s with bootstrap %s: %s", snapshot, outOfPolicyVersion, conditionSummary(kcp))
		}
		machines := &clusterv1.MachineList{}
		if err := x.Client.List(ctx, machines, client.InNamespace(x.ns), client.MatchingLabels{clusterv1.MachineControlPlaneLabel: ""}); err != nil {
			return err
		}
		if len(machines.Items) <= 3 {
			return fmt.Errorf("%d control-plane Machines: the scale-up to 5 has not resumed", len(machines.Items))
		}
		return nil
	})
}

// snapshotVersion is the version a goreleaser snapshot built after the tag of release stamps
// into the managers: .goreleaser.yaml snapshot.version_template, {{ incpatch .Version }}-dev+
// {{ .ShortCommit }} (checked here, so that the test follows the template if it changes).
func snapshotVersion(t *testing.T, release string) string {
	t.Helper()
	const template = `version_template: "{{ incpatch .Version }}-dev+{{ .ShortCommit }}"`
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(root, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), template) {
		t.Fatalf(".goreleaser.yaml has no snapshot %s: update snapshotVersion", template)
	}
	v, err := version.ParseSemantic(release)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("v%d.%d.%d-dev+3f3b205", v.Major(), v.Minor(), v.Patch()+1)
}

// updateControlPlane changes the control plane's spec.
func (x *mixedManagement) updateControlPlane(t *testing.T, mutate func(*controlplanev1.KairosControlPlaneSpec)) {
	t.Helper()
	ctx := framework.Context(t)
	framework.Eventually(t, 30*time.Second, func() error {
		kcp := &controlplanev1.KairosControlPlane{}
		if err := x.Client.Get(ctx, client.ObjectKeyFromObject(x.kcp), kcp); err != nil {
			return err
		}
		mutate(&kcp.Spec)
		return x.Client.Update(ctx, kcp)
	})
}

// conditionSummary lists a control plane's false conditions with their messages, for failures.
func conditionSummary(kcp *controlplanev1.KairosControlPlane) string {
	var out []string
	for _, c := range kcp.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			out = append(out, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	return strings.Join(out, "; ")
}

// conditionMessage describes one condition of obj, for failures.
func conditionMessage(obj conditions.Getter, typ string) string {
	c := conditions.Get(obj, typ)
	if c == nil {
		return "not set"
	}
	return fmt.Sprintf("%s, %s: %s", c.Status, c.Reason, c.Message)
}

// componentUIDs returns the UIDs of a provider's installed Deployment, ServiceAccounts, webhook
// configurations and RBAC, by kind/name.
func (m *management) componentUIDs(t *testing.T, p providerSpec) map[string]types.UID {
	t.Helper()
	ctx := context.Background()
	byLabel := client.MatchingLabels{clusterv1.ProviderNameLabel: p.Label}
	out := map[string]types.UID{}
	lists := map[string]client.ObjectList{
		"Deployment":                     &appsv1.DeploymentList{},
		"ServiceAccount":                 &corev1.ServiceAccountList{},
		"Service":                        &corev1.ServiceList{},
		"MutatingWebhookConfiguration":   &admissionv1.MutatingWebhookConfigurationList{},
		"ValidatingWebhookConfiguration": &admissionv1.ValidatingWebhookConfigurationList{},
		"ClusterRole":                    &rbacv1.ClusterRoleList{},
		"ClusterRoleBinding":             &rbacv1.ClusterRoleBindingList{},
		"Role":                           &rbacv1.RoleList{},
		"RoleBinding":                    &rbacv1.RoleBindingList{},
	}
	for kind, l := range lists {
		if err := m.Client.List(ctx, l, byLabel); err != nil {
			t.Fatal(err)
		}
		if err := meta.EachListItem(l, func(o runtime.Object) error {
			a, err := meta.Accessor(o)
			if err != nil {
				return err
			}
			out[kind+"/"+a.GetNamespace()+"/"+a.GetName()] = a.GetUID()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < len(lists) {
		t.Fatalf("%s: components missing: %v", p.Label, out)
	}
	return out
}

// crdUIDs returns the UIDs of a provider's CRDs.
func (m *management) crdUIDs(t *testing.T, p providerSpec) map[string]types.UID {
	t.Helper()
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := m.Client.List(context.Background(), list, client.MatchingLabels{clusterv1.ProviderNameLabel: p.Label}); err != nil {
		t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, c := range list.Items {
		out[c.Name] = c.UID
	}
	return out
}

// configsReady checks that every KairosConfig of the namespace reports its data.
func (m *management) configsReady(ns string) error {
	configs := &bootstrapv1.KairosConfigList{}
	if err := m.Client.List(context.Background(), configs, client.InNamespace(ns)); err != nil {
		return err
	}
	for i := range configs.Items {
		c := &configs.Items[i]
		if !conditions.IsTrue(c, bootstrapv1.DataSecretAvailableCondition) || c.Status.DataSecretName == "" {
			return fmt.Errorf("KairosConfig %s does not report its data: %+v", c.Name, c.Status)
		}
	}
	return nil
}

func deploymentUID(uids map[string]types.UID) types.UID {
	for k, v := range uids {
		if strings.HasPrefix(k, "Deployment/") {
			return v
		}
	}
	return ""
}

func equalUIDs(a, b map[string]types.UID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
